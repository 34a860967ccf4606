"""The MI proxies of one GRPO step's completions (PAPER.md sections 2 and 6).

Rows: the step's completions, each with its prompt's token ids (and, with a
vision-language model, its prompt's image inputs). Z is the completion's
reasoning (:mod:`~mirage.integrations.trl.reasoning`), re-encoded from its text like
MIRAGE's own diagnostic does; X is the prompt followed by the completion's text before
Z. The proxies are :func:`mirage.plugins.diagnostics.mi.mi_proxies`, unchanged.
"""

from __future__ import annotations

import statistics

import torch

from mirage.integrations.trl.images import PromptImages
from mirage.integrations.trl.options import MirageOptions
from mirage.integrations.trl.reasoning import split_completion
from mirage.integrations.trl.scoring import cross_score
from mirage.plugins.diagnostics.mi import mi_proxies

# The proxies logged (docs/integrations.md has their meaning and chance levels).
LOGGED_PROXIES = ("retrieval_acc", "retrieval_chance", "mi_est", "mi_seq_est", "mi_zscore",
                  "h_cond", "h_marg")


def encode(tokenizer, text: str) -> list[int]:
    """``text`` as token ids, without the special tokens a tokenizer may add around it."""
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def step_metrics(model: torch.nn.Module, tokenizer, prompts: list[list[int]], completions: list[str],
                 options: MirageOptions, images: list[PromptImages | None] | None = None) -> dict[str, float]:
    """``mi/*`` metrics of the rows (``prompts[n]``: token ids, ``completions[n]``: text,
    ``images[n]``: the prompt's image inputs or None): format validity and reasoning
    length always; the proxies when at least two distinct prompts and one non-empty
    reasoning exist."""
    splits = [split_completion(text, options.reasoning) for text in completions]
    reasonings = [encode(tokenizer, s.reasoning) for s in splits]
    metrics = {
        "mi/format_valid": statistics.fmean(s.valid for s in splits),
        "mi/reasoning_tokens": statistics.fmean(len(z) for z in reasonings),
    }
    prefixes = [encode(tokenizer, s.prefix) for s in splits]
    scores = cross_score(model, prompts, prefixes, reasonings, tokenizer.pad_token_id or 0,
                         options.score_batch_size, images)
    if scores is not None:
        proxies = mi_proxies(scores.logprobs, scores.lengths, scores.owners, options.zscore_epsilon)
        metrics |= {f"mi/{name}": proxies[name] for name in LOGGED_PROXIES}
        metrics["mi/scored_reasonings"] = float(len(scores.lengths))
    return metrics

"""The run's sampling settings as vLLM ``SamplingParams`` keyword arguments, and the
engine's outputs cut the way the local backend cuts its own."""

from __future__ import annotations

from typing import Any


def sampling_arguments(*, temperature: float, greedy: bool, max_new_tokens: int, top_p: float,
                       min_p: float, seed: int | None, eos: int) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams``: greedy is temperature 0 (vLLM's
    argmax; truncation ignored, as the local backend ignores it), stopping only at the
    tokenizer's end token (kept in the output), the sampled tokens' own log-probs
    (``logprobs=0``) and no detokenization (the loop works on ids)."""
    return {
        "n": 1,
        "temperature": 0.0 if greedy else temperature,
        "top_p": 1.0 if greedy else top_p,
        "min_p": 0.0 if greedy else min_p,
        "max_tokens": max_new_tokens,
        "seed": None if greedy else seed,
        "stop_token_ids": [eos],
        "logprobs": 0,
        "detokenize": False,
    }


def cut_response(token_ids: list[int], logprobs: list[float], *, eos: int,
                 pad: int) -> tuple[list[int], list[float] | None]:
    """``LocalBackend.generate``'s rule on an engine output: up to and including the first
    end token, padding tokens dropped (unless padding is the end token). The log-probs of
    the kept tokens, or None when a padding token was dropped: the tokens after it were
    sampled after a prefix the response no longer has."""
    if eos in token_ids:
        end = token_ids.index(eos) + 1
        token_ids, logprobs = token_ids[:end], logprobs[:end]
    if pad == eos or pad not in token_ids:
        return token_ids, logprobs
    return [t for t in token_ids if t != pad], None


def sampled_logprobs(output: Any) -> list[float]:
    """The log-prob of each sampled token of a vLLM ``CompletionOutput`` (``logprobs=0``:
    one entry per position, holding the sampled token)."""
    return [float(position[token].logprob) for token, position in zip(output.token_ids, output.logprobs)]

"""Cross-scoring with a Hugging Face causal LM (PAPER.md sections 2 and 6).

L[n, j] = sum over Z_n's tokens of log p(Z_n | X_j + prefix_n): every reasoning of the
step teacher-forced after every distinct prompt of the step, as MIRAGE's own diagnostic
does (mirage/plugins/diagnostics/cross_scoring.py), with one plain forward per pair (no
key/value cache sharing), in chunks of right-padded sequences. With a vision-language
model, X_j is prompt j's ids with its own image inputs (:mod:`~mirage.integrations.trl.images`):
two prompts are one column when their ids and their images are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mirage.integrations.trl.images import PromptImages, pair_inputs


@dataclass
class CrossScores:
    """``logprobs``: ``[N, C]`` summed log-probs of N reasonings under C prompts;
    ``lengths``: ``[N]`` |Z_n| in tokens; ``owners``: ``[N]`` each reasoning's own column."""

    logprobs: torch.Tensor
    lengths: torch.Tensor
    owners: torch.Tensor


@torch.no_grad()
def score_pairs(model: torch.nn.Module, contexts: list[list[int]], targets: list[list[int]],
                pad_id: int, batch_size: int,
                images: list[PromptImages | None] | None = None) -> torch.Tensor:
    """``[M]`` float64 sums of log p(target_m | context_m), M pairs teacher-forced in
    chunks of ``batch_size`` right-padded sequences (every context non-empty). ``images[m]``:
    the image inputs of the prompt that ``context_m`` starts with (None: none)."""
    device = next(model.parameters()).device
    images = images if images is not None else [None] * len(contexts)
    sums = []
    for start in range(0, len(contexts), batch_size):
        chunk = list(zip(contexts[start:start + batch_size], targets[start:start + batch_size]))
        width = max(len(x) + len(z) for x, z in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        target = torch.zeros((len(chunk), width), dtype=torch.bool)
        for row, (x, z) in enumerate(chunk):
            ids[row, :len(x) + len(z)] = torch.tensor(x + z)
            mask[row, :len(x) + len(z)] = 1
            target[row, len(x):len(x) + len(z)] = True
        shown = pair_inputs(images[start:start + batch_size], width, device)
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), **shown).logits.float()
        # the logit at position t predicts the token at t + 1
        logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
        picked = logprobs.gather(2, ids[:, 1:, None].to(device)).squeeze(2)
        sums.append((picked.double() * target[:, 1:].to(device)).sum(1).cpu())
    return torch.cat(sums) if sums else torch.zeros(0, dtype=torch.float64)


def distinct_prompts(prompts: list[list[int]], images: list[PromptImages | None]) -> tuple[list[int], list[int]]:
    """The row of each distinct prompt in first-seen order (the columns), and each row's
    column. Two prompts are one when their ids and their images' digests are equal."""
    index: dict[tuple, int] = {}
    first_rows, owners = [], []
    for row, (ids, shown) in enumerate(zip(prompts, images)):
        key = (tuple(ids), shown.digest if shown is not None else None)
        if key not in index:
            index[key] = len(first_rows)
            first_rows.append(row)
        owners.append(index[key])
    return first_rows, owners


def cross_score(model: torch.nn.Module, prompts: list[list[int]], prefixes: list[list[int]],
                reasonings: list[list[int]], pad_id: int, batch_size: int,
                images: list[PromptImages | None] | None = None) -> CrossScores | None:
    """The cross-score matrix of the rows with a non-empty reasoning, over the distinct
    prompts of all rows (a prompt whose reasonings are all empty is still a column).
    ``images[n]``: row n's prompt's image inputs (None, or no ``images``: a text prompt).
    Row n under column j is scored after ``prompts[j] + prefixes[n]``, with prompt j's
    images. None when fewer than two prompts or no reasoning remain. The model runs in
    eval mode (no dropout) and gets its mode back."""
    images = images if images is not None else [None] * len(prompts)
    first_rows, owners = distinct_prompts(prompts, images)
    rows = [n for n, z in enumerate(reasonings) if z]
    if len(first_rows) < 2 or not rows:
        return None
    contexts = [prompts[j] + prefixes[n] for n in rows for j in first_rows]
    targets = [reasonings[n] for n in rows for _ in first_rows]
    shown = [images[j] for _ in rows for j in first_rows]
    training = model.training
    model.eval()
    try:
        sums = score_pairs(model, contexts, targets, pad_id, batch_size, shown)
    finally:
        model.train(training)
    return CrossScores(
        logprobs=sums.view(len(rows), len(first_rows)),
        lengths=torch.tensor([len(reasonings[n]) for n in rows]),
        owners=torch.tensor([owners[n] for n in rows]),
    )

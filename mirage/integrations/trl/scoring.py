"""Cross-scoring with a Hugging Face causal LM (PAPER.md sections 2 and 6).

L[n, j] = sum over Z_n's tokens of log p(Z_n | X_j + prefix_n): every reasoning of the
step teacher-forced after every distinct prompt of the step, as MIRAGE's own diagnostic
does (mirage/plugins/diagnostics/cross_scoring.py), with one plain forward per pair (no
key/value cache sharing), in chunks of right-padded sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mirage.plugins.diagnostics.cross_scoring import assign_columns


@dataclass
class CrossScores:
    """``logprobs``: ``[N, C]`` summed log-probs of N reasonings under C prompts;
    ``lengths``: ``[N]`` |Z_n| in tokens; ``owners``: ``[N]`` each reasoning's own column."""

    logprobs: torch.Tensor
    lengths: torch.Tensor
    owners: torch.Tensor


@torch.no_grad()
def score_pairs(model: torch.nn.Module, contexts: list[list[int]], targets: list[list[int]],
                pad_id: int, batch_size: int) -> torch.Tensor:
    """``[M]`` float64 sums of log p(target_m | context_m), M pairs teacher-forced in
    chunks of ``batch_size`` right-padded sequences (every context non-empty)."""
    device = next(model.parameters()).device
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
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
        # the logit at position t predicts the token at t + 1
        logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
        picked = logprobs.gather(2, ids[:, 1:, None].to(device)).squeeze(2)
        sums.append((picked.double() * target[:, 1:].to(device)).sum(1).cpu())
    return torch.cat(sums) if sums else torch.zeros(0, dtype=torch.float64)


def cross_score(model: torch.nn.Module, prompts: list[list[int]], prefixes: list[list[int]],
                reasonings: list[list[int]], pad_id: int, batch_size: int) -> CrossScores | None:
    """The cross-score matrix of the rows with a non-empty reasoning, over the distinct
    ``prompts`` of all rows (a prompt whose reasonings are all empty is still a column).
    Row n under column j is scored after ``prompts[j] + prefixes[n]``. None when fewer
    than two prompts or no reasoning remain. The model runs in eval mode (no dropout)
    and gets its mode back."""
    columns, owners = assign_columns(prompts)
    rows = [n for n, z in enumerate(reasonings) if z]
    if len(columns) < 2 or not rows:
        return None
    contexts = [columns[j] + prefixes[n] for n in rows for j in range(len(columns))]
    targets = [reasonings[n] for n in rows for _ in columns]
    training = model.training
    model.eval()
    try:
        sums = score_pairs(model, contexts, targets, pad_id, batch_size)
    finally:
        model.train(training)
    return CrossScores(
        logprobs=sums.view(len(rows), len(columns)),
        lengths=torch.tensor([len(reasonings[n]) for n in rows]),
        owners=torch.tensor([owners[n] for n in rows]),
    )

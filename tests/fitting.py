"""Supervised fits the diagnostics' tests build their policies with."""

from __future__ import annotations


def fit(backend, contexts, targets, *, steps: int, below: float) -> float:
    """Teacher-force ``targets`` after ``contexts`` on ``backend``'s policy, one optimizer
    step at a time, until the mean per-token loss is below ``below`` or ``steps`` steps
    were taken; the last loss (the caller asserts it)."""
    loss = float("inf")
    for _ in range(steps):
        out = backend.forward(contexts, targets)
        mean = -(out.logprobs * out.mask).sum() / out.mask.sum()
        mean.backward()
        backend.optimizer_step(1.0)
        loss = mean.item()
        if loss < below:
            break
    return loss

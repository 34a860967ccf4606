"""Gradient decomposition by reward-variance bucket (PAPER.md section 3).

Every ``every`` steps (its option, ``diagnostics.options.grad.every``), the batch's prompt groups are sorted by in-group reward
std into 6 equal-rank buckets q1 (lowest) .. q6, plus "all". For each bucket the
algorithm's own loss over the bucket's trajectories (weighted as if they were one
mini-batch, advantages computed over the whole batch) is split into its task, entropy
and KL terms, and each term's gradient norm is recorded: total, per sample (divided by
the bucket's trajectories) and per token (divided by its response tokens). Gradients
come from the backend's ``loss_gradients`` (the local backend: ``torch.autograd.grad``):
nothing accumulates into the parameters' ``.grad``, no optimizer steps, and the weights
stay bit-identical.

The terms carry their coefficients (entropy_coef, kl_coef): they are the parts of the
gradient the update applies. With kl_coef 0 the KL term is absent and its norms are 0.
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field

from mirage.core.plugin_api.components import Diagnostic
from mirage.core.rl.batch import Batch

BUCKETS = 6
TERMS = ("task", "entropy", "kl")


def variance_buckets(stds: list[float], buckets: int = BUCKETS) -> list[list[int]]:
    """Indices of groups per bucket, lowest reward std first. Groups are ranked by std
    (an undefined std, G = 1, counts as lowest; ties keep index order) and the group of
    rank r of n goes to bucket floor(r * buckets / n); with fewer groups than buckets
    some buckets stay empty."""
    order = sorted(range(len(stds)), key=lambda i: (-math.inf if math.isnan(stds[i]) else stds[i], i))
    out: list[list[int]] = [[] for _ in range(buckets)]
    for rank, index in enumerate(order):
        out[rank * buckets // len(stds)].append(index)
    return out


def term_gradients(run, rows) -> dict[str, torch.Tensor]:
    """Each loss term's flattened gradient over the trajectories ``rows``, weighted as one
    mini-batch and summed over micro-batches, from the backend (``loss_gradients``)."""
    algorithm = run.algorithm
    return run.backend.loss_gradients(algorithm.mini_batch_rows(rows), algorithm.loss_recipe())


class GradientOptions(BaseModel):
    """The ``grad`` diagnostic's options (``diagnostics.options.grad``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: int = Field(20, ge=1, description="gradient decomposition at steps divisible by this")


class GradientDecomposition(Diagnostic):
    """grad/{bucket}/{term}/{norm} for every algorithm that exposes ``advantage_rows``,
    ``mini_batch_rows`` and ``loss_recipe`` (all built-ins); other algorithms get no
    grad/* metrics."""

    Options = GradientOptions
    REQUIRES = ("advantage_rows", "mini_batch_rows", "loss_recipe")

    def due(self, step: int) -> bool:
        return step % self.options.every == 0

    def measure(self, run, batch: Batch) -> dict[str, float]:
        algorithm = run.algorithm
        if not all(hasattr(algorithm, name) for name in self.REQUIRES):
            return {}
        groups = [g for g in batch.groups if g.trajectories]
        if not groups:
            return {}
        with torch.enable_grad():
            rows = algorithm.advantage_rows(run, groups)
            owner = [index for index, g in enumerate(groups) for _ in g.trajectories]
            buckets = {f"q{b + 1}": set(members) for b, members in
                       enumerate(variance_buckets([g.reward_std for g in groups])) if members}
            buckets["all"] = set(range(len(groups)))
            metrics: dict[str, float] = {}
            for name, members in buckets.items():
                chosen = [turns for turns, index in zip(rows, owner) if index in members and turns]
                if chosen:
                    metrics |= self.norms(name, chosen, term_gradients(run, chosen))
        return metrics

    @staticmethod
    def norms(bucket: str, rows, gradients: dict[str, torch.Tensor]) -> dict[str, float]:
        samples = len(rows)
        tokens = max(sum(len(r.turn.response_ids) for turns in rows for r in turns), 1)
        metrics = {}
        for term in TERMS:
            norm = float(gradients[term].norm()) if term in gradients else 0.0
            metrics[f"grad/{bucket}/{term}/total"] = norm
            metrics[f"grad/{bucket}/{term}/per_sample"] = norm / samples
            metrics[f"grad/{bucket}/{term}/per_token"] = norm / tokens
        return metrics

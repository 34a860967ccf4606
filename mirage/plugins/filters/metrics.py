"""Per-step ``filter/*`` metrics a filter reports with its selection (docs/metrics.md)."""

from __future__ import annotations

from mirage.core.rl.batch import Batch
from mirage.core.rl.returns import variance_spread


def selection_metrics(batch: Batch, scores: list[float], kept: list[int],
                      kept_samples: dict[int, list[int]] | None = None) -> dict[str, float]:
    """Metrics of keeping groups ``kept`` (and, per group, ``kept_samples``; default all
    trajectories) of ``batch``. ``scores``: [P] reward scores (RV or std) whose kept
    share is ``filter/kept_score_mass``, whatever the filter ranked by."""
    kept_samples = kept_samples or {}
    variances = [g.reward_variance for g in batch.groups]
    total = sum(scores)
    return {
        "filter/kept_groups": float(len(kept)),
        "filter/kept_ratio": len(kept) / len(scores) if scores else 0.0,
        "filter/kept_trajectories": float(sum(
            len(kept_samples.get(i, batch.groups[i].trajectories)) for i in kept)),
        "filter/kept_score_mass": sum(scores[i] for i in kept) / total if total > 0 else 0.0,
        "filter/zero_variance_groups": float(sum(v == 0 for v in variances)),
        # PAPER.md section 4: the pre-flight predictor, Std(RV) / Mean(RV)
        "filter/rv_cv": variance_spread(variances),
    }

"""Built-in filters: ``none`` and ``top_p`` (variance-mass selection, PAPER.md section 4)."""

from __future__ import annotations

import math
import statistics

from mirage.core.batch import Batch, Selection
from mirage.core.config import FilterConfig
from mirage.core.hookspecs import hookimpl


def group_scores(batch: Batch, score: str) -> list[float]:
    """Per-group reward variance (the paper's RV) or reward std (the reference code's)."""
    values = [g.reward_variance for g in batch.groups]
    if score == "std":
        values = [math.sqrt(v) for v in values]
    return values


def top_p_indices(scores: list[float], rho: float, include_zero: bool = False) -> list[int]:
    """Fewest groups, highest score first, whose cumulative score reaches rho * total.

    Ties keep the lower index first. With ``include_zero`` False, groups scoring 0 are
    never kept (an all-zero batch keeps nothing); with it True, an all-zero batch keeps
    every group, since there is no signal to rank by.
    """
    total = sum(scores)
    if total <= 0:
        return list(range(len(scores))) if include_zero else []
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    threshold = rho * total * (1 - 1e-12)
    kept, mass = [], 0.0
    for index in order:
        if scores[index] <= 0 and not include_zero:
            break
        kept.append(index)
        mass += scores[index]
        if mass >= threshold:
            break
    return sorted(kept)


def selection_metrics(batch: Batch, scores: list[float], kept: list[int]) -> dict[str, float]:
    variances = [g.reward_variance for g in batch.groups]
    mean_rv = statistics.fmean(variances) if variances else math.nan
    total = sum(scores)
    return {
        "filter/kept_groups": float(len(kept)),
        "filter/kept_ratio": len(kept) / len(scores) if scores else 0.0,
        "filter/kept_score_mass": sum(scores[i] for i in kept) / total if total > 0 else 0.0,
        "filter/zero_variance_groups": float(sum(v == 0 for v in variances)),
        "filter/rv_cv": statistics.pstdev(variances) / mean_rv if mean_rv > 0 else math.nan,
    }


class NoFilter:
    """Keeps every group (the paper's no-filter baseline)."""

    def __init__(self, config: FilterConfig):
        self.config = config

    def select(self, batch: Batch) -> Selection:
        scores = group_scores(batch, self.config.score)
        kept = list(range(len(batch.groups)))
        return Selection(kept, metrics=selection_metrics(batch, scores, kept))


class TopPFilter:
    """Keeps the highest-RV prompts until a ``rho`` share of the total RV is reached."""

    requires_variance = True

    def __init__(self, config: FilterConfig):
        self.config = config

    def select(self, batch: Batch) -> Selection:
        scores = group_scores(batch, self.config.score)
        kept = top_p_indices(scores, self.config.rho, self.config.include_zero)
        return Selection(kept, metrics=selection_metrics(batch, scores, kept))


@hookimpl
def mirage_register_filters(register):
    register("none", NoFilter)
    register("top_p", TopPFilter)

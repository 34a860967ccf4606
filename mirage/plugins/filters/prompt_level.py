"""Prompt-level filters: each keeps or drops whole groups (all G trajectories of a prompt).

``top_p`` and ``top_k`` rank by the reward score (``filter.score``: RV or std);
``entropy`` and ``length`` rank by mean policy entropy or mean response length and keep a
``rho`` fraction like ``top_k``. ``filter.keep`` flips every ranking, and with
``include_zero`` False no ranking filter keeps a zero-variance group.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mirage.core.plugin_api.components import Filter
from mirage.core.rl.batch import Batch, Selection
from mirage.plugins.filters.metrics import selection_metrics
from mirage.plugins.filters.rules import softmax_top_p_indices, top_k_indices, top_p_indices
from mirage.plugins.filters.scores import (
    eligible_groups, group_scores, mean_entropy, mean_response_tokens,
)


class NoFilter(Filter):
    """Keeps every group (the paper's no-filter baseline)."""

    requires_variance = False

    def select(self, batch: Batch) -> Selection:
        kept = list(range(len(batch.groups)))
        return Selection(kept, metrics=selection_metrics(batch, group_scores(batch, self.config.filter.score), kept))


class RankingFilter(Filter):
    """Shared shape of the ranking filters: ``ranked_by`` gives one score per group,
    ``choose`` turns scores into kept indices with one rule from ``rules``."""

    requires_variance = True

    def ranked_by(self, batch: Batch) -> list[float]:
        return group_scores(batch, self.config.filter.score)

    def choose(self, scores: list[float], eligible: list[bool]) -> list[int]:
        raise NotImplementedError

    def select(self, batch: Batch) -> Selection:
        settings = self.config.filter
        kept = self.choose(self.ranked_by(batch), eligible_groups(batch, settings.include_zero))
        return Selection(kept, metrics=selection_metrics(batch, group_scores(batch, settings.score), kept))


class TopPOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["linear", "softmax"] = Field(
        "linear", description="accumulate sorted scores (linear) or nucleus selection over "
        "softmax(scores) (softmax, the paper's main table)"
    )


class TopPFilter(RankingFilter):
    """Keeps the best-ranked groups until a ``rho`` share of the score mass (linear) or of
    the softmax probability (softmax) is reached (PAPER.md sections 4 and 6); which one is
    its option ``filter.options.mode``."""

    Options = TopPOptions

    def choose(self, scores: list[float], eligible: list[bool]) -> list[int]:
        # A group scores 0 exactly when it has no variance, so ``include_zero`` already
        # says which groups are eligible.
        settings = self.config.filter
        rule = top_p_indices if self.options.mode == "linear" else softmax_top_p_indices
        return rule(scores, settings.rho, settings.include_zero, settings.keep)


class TopKFilter(RankingFilter):
    """Keeps ``max(1, int(rho * P))`` groups, best-ranked first."""

    def choose(self, scores: list[float], eligible: list[bool]) -> list[int]:
        return top_k_indices(scores, self.config.filter.rho, self.config.filter.keep, eligible)


class EntropyFilter(TopKFilter):
    """Ranks groups by the mean policy entropy of their responses
    (:func:`mirage.plugins.filters.scores.mean_entropy`), keeps a ``rho`` fraction."""

    requires_variance = False

    def ranked_by(self, batch: Batch) -> list[float]:
        return [mean_entropy(g) for g in batch.groups]


class LengthFilter(TopKFilter):
    """Ranks groups by mean response length in tokens
    (:func:`mirage.plugins.filters.scores.mean_response_tokens`), keeps a ``rho`` fraction."""

    requires_variance = False

    def ranked_by(self, batch: Batch) -> list[float]:
        return [mean_response_tokens(g) for g in batch.groups]

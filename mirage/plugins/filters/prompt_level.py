"""Prompt-level filters: each keeps or drops whole groups (all G trajectories of a prompt).

``top_p`` and ``top_k`` rank by the reward score (``filter.score``: RV or std);
``entropy`` and ``length`` rank by mean policy entropy or mean response length and keep a
``rho`` fraction like ``top_k``. ``filter.keep`` flips every ranking, and with
``include_zero`` False no ranking filter keeps a zero-variance group.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from mirage.core.plugin_api.components import Filter
from mirage.core.rl.batch import Batch, Selection
from mirage.plugins.filters.conventions import (
    TOP_K_PRESETS, TOP_P_PRESETS, Convention, FullMass, NoMass, Rounding, TopKConventions,
    TopPConventions, resolve,
)
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
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mode: Literal["linear", "softmax"] = Field(
        "linear", description="accumulate sorted scores (linear) or nucleus selection over "
        "softmax(scores) (softmax, the paper's main table)"
    )
    convention: Convention = Field(
        "mirage", description="every edge below at once: mirage or ragen (the reference "
        "code's); docs/conventions.md")
    selection_eps: Optional[float] = Field(
        None, ge=0, description="linear: the mass to reach is rho * sum - this (ragen 0.01; "
        "default: the convention's)")
    full_mass: Optional[FullMass] = Field(
        None, description="at rho = 1: keep the positive-score groups, or every_eligible group "
        "(default: the convention's)")
    no_mass: Optional[NoMass] = Field(
        None, description="linear, all scores 0: keep_eligible groups or keep_none (default: "
        "the convention's)")
    zero_stops: Optional[bool] = Field(
        None, description="linear: a zero score ends the walk, and short of the mass nothing "
        "is kept (default: the convention's)")

    def conventions(self) -> TopPConventions:
        """The edges these options choose."""
        return resolve(TOP_P_PRESETS, self.convention, selection_eps=self.selection_eps,
                       full_mass=self.full_mass, no_mass=self.no_mass, zero_stops=self.zero_stops)


class TopPFilter(RankingFilter):
    """Keeps the best-ranked groups until a ``rho`` share of the score mass (linear) or of
    the softmax probability (softmax) is reached (PAPER.md sections 4 and 6); which one is
    its option ``filter.options.mode``, and its edges its conventions (docs/conventions.md)."""

    Options = TopPOptions

    def choose(self, scores: list[float], eligible: list[bool]) -> list[int]:
        # A group scores 0 exactly when it has no variance, so ``include_zero`` already
        # says which groups are eligible.
        settings = self.config.filter
        conventions = self.options.conventions()
        if self.options.mode == "linear":
            return top_p_indices(scores, settings.rho, settings.include_zero, settings.keep, conventions)
        return softmax_top_p_indices(scores, settings.rho, settings.include_zero, settings.keep,
                                     conventions.full_mass)


class TopKOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    convention: Convention = Field(
        "mirage", description="every edge below at once: mirage or ragen (the reference "
        "code's); docs/conventions.md")
    rounding: Optional[Rounding] = Field(
        None, description="the count kept: int(rho * P + 1e-9) (slack) or int(rho * P) "
        "(truncate, ragen) (default: the convention's)")

    def conventions(self) -> TopKConventions:
        """The edges these options choose."""
        return resolve(TOP_K_PRESETS, self.convention, rounding=self.rounding)


class TopKFilter(RankingFilter):
    """Keeps ``max(1, int(rho * P))`` groups, best-ranked first."""

    Options = TopKOptions

    def choose(self, scores: list[float], eligible: list[bool]) -> list[int]:
        return top_k_indices(scores, self.config.filter.rho, self.config.filter.keep, eligible,
                             self.options.conventions().rounding)


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

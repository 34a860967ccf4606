"""The quartile filter: train on one reward-score quartile of the batch at a time.

PAPER.md section 5, finding 6: ranking the P prompt groups by reward variance and
training only on the top, second, third or bottom quarter shows success and MI falling
from Q1 to Q4. Every group is ranked (zero-variance groups fill the lowest quartile), so
``include_zero`` does not apply; ``keep: smallest`` reverses the ranking.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mirage.core.rl.batch import Batch, Selection
from mirage.plugins.filters.metrics import selection_metrics
from mirage.plugins.filters.prompt_level import RankingFilter
from mirage.plugins.filters.rules import ranking
from mirage.plugins.filters.scores import group_scores


def quartile_indices(scores: list[float], quartile: int, keep: str = "largest") -> list[int]:
    """[P] scores -> the sorted indices of ranks [(q-1)P/4, qP/4) (at least one group)."""
    ranked = ranking(scores, keep)  # type: ignore[arg-type]
    start = (quartile - 1) * len(ranked) // 4
    end = max(quartile * len(ranked) // 4, start + 1)
    return sorted(ranked[start:end])


class QuartileOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    quartile: int = Field(
        1, ge=1, le=4, description="train only on this reward-score quartile of the batch "
        "(1: highest, 4: lowest), a quarter of the prompts (PAPER.md section 5)"
    )


class QuartileFilter(RankingFilter):
    """Keeps the groups in quartile ``filter.options.quartile`` of the score ranking."""

    Options = QuartileOptions

    def select(self, batch: Batch) -> Selection:
        scores = group_scores(batch, self.config.filter.score)
        kept = quartile_indices(scores, self.options.quartile, self.config.filter.keep)
        return Selection(kept, metrics=selection_metrics(batch, scores, kept))

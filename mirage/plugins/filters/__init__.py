"""Built-in filters (PAPER.md sections 4 and 6; docs/filters.md).

``none``; ``top_p`` (reward-variance mass, linear or softmax); ``top_k`` (a fixed
fraction); ``trajectory`` (every prompt kept, trajectories chosen inside groups);
``entropy`` and ``length`` (rank by mean policy entropy or response length);
``quartile`` (one reward-score quartile of the batch). The
selection rules are pure functions in ``rules``; what groups are ranked by is in
``scores``.
"""

from __future__ import annotations

from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.plugins.filters.metrics import selection_metrics
from mirage.plugins.filters.prompt_level import (
    EntropyFilter, LengthFilter, NoFilter, RankingFilter, TopKFilter, TopPFilter,
)
from mirage.plugins.filters.quartile import QuartileFilter, quartile_indices
from mirage.plugins.filters.rules import (
    ranking, softmax_top_p_indices, top_k_indices, top_p_indices, trajectory_indices,
)
from mirage.plugins.filters.scores import (
    eligible_groups, group_scores, mean_entropy, mean_response_tokens, trajectory_entropy,
)
from mirage.plugins.filters.trajectory import TrajectoryFilter

__all__ = [
    "EntropyFilter", "LengthFilter", "NoFilter", "QuartileFilter", "RankingFilter", "TopKFilter",
    "TopPFilter", "TrajectoryFilter", "quartile_indices", "eligible_groups", "group_scores", "mean_entropy", "mean_response_tokens",
    "ranking", "selection_metrics", "softmax_top_p_indices", "top_k_indices", "top_p_indices",
    "trajectory_entropy", "trajectory_indices",
]


@hookimpl
def mirage_register_filters(register):
    register("none", NoFilter)
    register("top_p", TopPFilter)
    register("top_k", TopKFilter)
    register("trajectory", TrajectoryFilter)
    register("entropy", EntropyFilter)
    register("length", LengthFilter)
    register("quartile", QuartileFilter)

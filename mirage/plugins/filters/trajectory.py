"""The trajectory-level filter: every prompt stays, trajectories are chosen inside groups."""

from __future__ import annotations

from mirage.core.plugin_api.components import Filter
from mirage.core.rl.batch import Batch, Selection
from mirage.plugins.filters.metrics import selection_metrics
from mirage.plugins.filters.rules import trajectory_indices
from mirage.plugins.filters.scores import group_scores


class TrajectoryFilter(Filter):
    """Keeps every group and, inside each, the trajectories of
    :func:`mirage.plugins.filters.rules.trajectory_indices` (farthest from the group's
    mean return first, until ``rho`` of its squared-deviation mass, both sides of the
    mean kept). GRPO then normalises advantages over the kept trajectories only."""

    requires_variance = True

    def select(self, batch: Batch) -> Selection:
        settings = self.config.filter
        kept = list(range(len(batch.groups)))
        samples = {i: trajectory_indices(g.returns, settings.rho, settings.keep)
                   for i, g in enumerate(batch.groups)}
        metrics = selection_metrics(batch, group_scores(batch, settings.score), kept, samples)
        # The mass this filter selects by: squared deviations from each group's mean.
        # A zero-variance group (returns equal within tolerance) has no mass, not dust.
        squared = [[0.0 if g.reward_variance == 0 else (r - g.reward_mean) ** 2 for r in g.returns]
                   for g in batch.groups]
        total = sum(map(sum, squared))
        kept_mass = sum(squared[i][k] for i, ks in samples.items() for k in ks)
        metrics["filter/kept_score_mass"] = kept_mass / total if total > 0 else 0.0
        return Selection(kept, kept_samples=samples, metrics=metrics)

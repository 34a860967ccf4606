"""Reward structure of a step's batch (PAPER.md finding 9: hard -> mixed -> variance collapse).

Per prompt group, from its G trajectories before filtering: zero variance when all G
returns are equal; hard when no trajectory succeeded, easy when all did, mixed
otherwise; the group's (unbiased) reward standard deviation; and the mean and the
(population) std over groups of the in-group reward variance, RV(x) of PAPER.md section 4,
whose fall is the precondition section 3 names for template collapse.
"""

from __future__ import annotations

import math
import statistics

from mirage.core.plugin_api.components import Diagnostic
from mirage.core.rl.batch import Batch, Group


def difficulty(group: Group) -> str:
    """"hard" (all fail), "easy" (all succeed) or "mixed"."""
    wins = sum(t.success for t in group.trajectories)
    if wins == 0:
        return "hard"
    return "easy" if wins == len(group.trajectories) else "mixed"


def reward_structure(batch: Batch) -> dict[str, float]:
    """Counts and shares over the batch's groups, and the spread of in-group reward std and
    variance (those only when G >= 2, where a group's std is defined)."""
    groups = [g for g in batch.groups if g.trajectories]
    if not groups:
        return {}
    kinds = [difficulty(g) for g in groups]
    metrics = {
        "reward/zero_variance_groups": float(sum(g.reward_variance == 0.0 for g in groups)),
        **{f"reward/{kind}_share": kinds.count(kind) / len(groups) for kind in ("hard", "mixed", "easy")},
    }
    stds = [g.reward_std for g in groups if not math.isnan(g.reward_variance)]
    if stds:
        metrics |= {
            "reward/std_mean": sum(stds) / len(stds),
            "reward/std_min": min(stds),
            "reward/std_max": max(stds),
        }
    variances = [g.reward_variance for g in groups if not math.isnan(g.reward_variance)]
    if variances:
        metrics |= {
            "reward/variance_mean": statistics.fmean(variances),
            "reward/variance_std": statistics.pstdev(variances),
        }
    return metrics


class RewardStructure(Diagnostic):
    """Reward structure of every step's batch (not only on diagnostic steps)."""

    def due(self, step: int) -> bool:
        return True

    def measure(self, run, batch: Batch) -> dict[str, float]:
        return reward_structure(batch)

"""The built-in advantage estimators, named by ``algorithm.adv_estimator``."""

from __future__ import annotations

from typing import Any

from mirage.core.plugin_api.components import AdvantageEstimator
from mirage.core.rl.batch import Trajectory
from mirage.plugins.verl_algorithms.common import Row
from mirage.plugins.verl_algorithms.outcome import outcome_rows
from mirage.plugins.verl_algorithms.ppo import gae_rows


class GAE(AdvantageEstimator):
    """veRL's ``gae`` over each multi-turn trajectory, with values from a critic
    (mirage/plugins/verl_algorithms/ppo.py).

    Its defaults are the reference's (PAPER.md section 6): gamma = lambda = 1, value clip
    0.5 (veRL's cliprange_value). The critic learns 10x faster than the actor, the
    reference's ratio (1e-5 vs 1e-6): 5e-4 for the tiny policy's 5e-5; its value head
    starts at zero and must catch up with the returns within a few iterations."""

    needs_critic = True
    defaults = {"gamma": 1.0, "lam": 1.0, "critic_lr": 5e-4, "value_clip": 0.5}

    def rows(self, run: Any, trajectories: list[Trajectory], groups: list[int],
             rewards: list[list[float]]) -> list[list[Row]]:
        return gae_rows(run, trajectories, rewards, self.config.algorithm)


class GroupOutcome(AdvantageEstimator):
    """veRL's ``grpo``: each trajectory's return against its prompt group's
    (mirage/plugins/verl_algorithms/outcome.py); divided by the group std unless
    ``norm_adv_by_std`` is False (Dr. GRPO)."""

    defaults = {"norm_adv_by_std": True}

    def rows(self, run: Any, trajectories: list[Trajectory], groups: list[int],
             rewards: list[list[float]]) -> list[list[Row]]:
        return outcome_rows(trajectories, groups, rewards, self.config.algorithm)

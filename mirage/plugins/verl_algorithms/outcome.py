"""Group outcome advantages (GRPO, Dr. GRPO, DAPO): one number per trajectory.

A trajectory's (shaped) episode return is compared with the other trajectories of its
prompt group: ``(R - mean) / (std + 1e-6)`` with the unbiased group std (GRPO, DAPO), or
``R - mean`` (Dr. GRPO). The advantage is copied to every response token of every turn.
"""

from __future__ import annotations

import numpy as np
import torch

from mirage.core.batch import Trajectory
from mirage.core.config import AlgorithmConfig
from mirage.plugins.verl_algorithms.common import Row, core_algos


def group_advantages(returns: list[float], groups: list[int], norm_by_std: bool) -> torch.Tensor:
    """``[N]`` advantage of each trajectory from veRL's ``grpo`` estimator; ``groups[i]``
    names trajectory i's prompt group."""
    estimator = core_algos().get_adv_estimator_fn("grpo")
    scores = torch.tensor([[r] for r in returns], dtype=torch.float32)
    advantages, _ = estimator(
        token_level_rewards=scores,
        response_mask=torch.ones_like(scores),
        index=np.array(groups),
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    return advantages[:, 0]


def outcome_rows(trajectories: list[Trajectory], groups: list[int], rewards: list[list[float]],
                 settings: AlgorithmConfig) -> list[list[Row]]:
    """Per trajectory, one row per turn with response tokens, every token carrying the
    trajectory's advantage. ``rewards[i]`` are trajectory i's (shaped) turn rewards."""
    advantages = group_advantages([sum(r) for r in rewards], groups, settings.norm_adv_by_std)
    return [
        [
            Row(turn, torch.full((len(turn.response_ids),), float(advantage)))
            for turn in trajectory.turns
            if turn.response_ids
        ]
        for trajectory, advantage in zip(trajectories, advantages)
    ]

"""Group outcome advantages (GRPO, Dr. GRPO, DAPO): one number per trajectory.

A trajectory's (shaped) episode return is compared with the other trajectories of its
prompt group: ``(R - mean) / (std + 1e-6)`` with the unbiased group std (GRPO, DAPO), or
``R - mean`` (Dr. GRPO). The advantage is copied to every response token of every turn.

``AlgorithmConfig.group_statistics`` picks how the group statistics are computed:

* ``exact`` (default): float64, and a group whose returns are equal within
  :func:`~mirage.core.rl.returns.returns_equal` gets advantage exactly 0, the paper's
  formula (PAPER.md section 3);
* ``verl``: veRL's ``grpo`` estimator as the reference code runs it, in float32, where
  the mean of equal returns can be off by a rounding step that ``/ (std + 1e-6)``
  magnifies (16 returns of 10.4 each get -0.48).

Both follow veRL's convention for a group of one trajectory: no baseline (mean 0, std 1).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import torch

from mirage.core.config.run_config import AlgorithmConfig, GroupStatistics
from mirage.core.rl.batch import Trajectory
from mirage.core.rl.returns import episode_return, group_mean, group_variance, returns_equal
from mirage.plugins.verl_algorithms.common import Row, core_algos

EPSILON = 1e-6  # veRL's epsilon in the std normalisation


def verl_group_advantages(returns: list[float], groups: list[int], norm_by_std: bool) -> torch.Tensor:
    """``[N]`` float32 advantage of each trajectory from veRL's ``grpo`` estimator;
    ``groups[i]`` names trajectory i's prompt group."""
    estimator = core_algos().get_adv_estimator_fn("grpo")
    scores = torch.tensor([[r] for r in returns], dtype=torch.float32)
    advantages, _ = estimator(
        token_level_rewards=scores,
        response_mask=torch.ones_like(scores),
        index=np.array(groups),
        epsilon=EPSILON,
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    return advantages[:, 0]


def members_of(groups: list[int]) -> dict[int, list[int]]:
    """Group name -> indices of its trajectories, in order."""
    members: dict[int, list[int]] = defaultdict(list)
    for i, name in enumerate(groups):
        members[name].append(i)
    return members


def exact_group_advantages(returns: list[float], groups: list[int], norm_by_std: bool) -> torch.Tensor:
    """``[N]`` float64 advantage of each trajectory, the estimator's formula in float64;
    exactly 0 for every trajectory of a group whose returns are equal (within tolerance)."""
    advantages = [0.0] * len(returns)
    for indices in members_of(groups).values():
        values = [returns[i] for i in indices]
        if len(values) == 1:  # veRL's convention: no baseline for a lone trajectory
            mean, scale = 0.0, (1.0 + EPSILON if norm_by_std else 1.0)
        elif returns_equal(values):
            continue  # no signal: advantage exactly 0
        else:
            mean = group_mean(values)
            scale = math.sqrt(group_variance(values)) + EPSILON if norm_by_std else 1.0
        for i in indices:
            advantages[i] = (returns[i] - mean) / scale
    return torch.tensor(advantages, dtype=torch.float64)


def group_advantages(returns: list[float], groups: list[int], norm_by_std: bool,
                     statistics: GroupStatistics) -> torch.Tensor:
    """``[N]`` advantages computed as ``statistics`` says (``AlgorithmConfig.group_statistics``)."""
    if statistics == "verl":
        return verl_group_advantages(returns, groups, norm_by_std)
    return exact_group_advantages(returns, groups, norm_by_std)


def verl_zero_variance_mass(returns: list[float], groups: list[int], norm_by_std: bool) -> float:
    """``update/verl_zero_variance_advantage_mass``: the sum of |veRL advantage| over the
    trajectories of zero-variance groups (at least two trajectories, returns equal
    within tolerance), divided by the number of trajectories N. Same units as
    ``update/advantage_abs_mean``; 0 under the paper's formula."""
    if not returns:
        return 0.0
    zero = [i for indices in members_of(groups).values()
            if len(indices) > 1 and returns_equal([returns[i] for i in indices]) for i in indices]
    if not zero:
        return 0.0
    advantages = verl_group_advantages(returns, groups, norm_by_std).double()
    return float(advantages[zero].abs().sum()) / len(returns)


def outcome_rows(trajectories: list[Trajectory], groups: list[int], rewards: list[list[float]],
                 settings: AlgorithmConfig) -> list[list[Row]]:
    """Per trajectory, one row per turn with response tokens, every token carrying the
    trajectory's advantage. ``rewards[i]`` are trajectory i's (shaped) turn rewards."""
    advantages = group_advantages([episode_return(r) for r in rewards], groups,
                                  settings.norm_adv_by_std, settings.group_statistics)
    return [
        [
            Row(turn, torch.full((len(turn.response_ids),), float(advantage)))
            for turn in trajectory.turns
            if turn.response_ids
        ]
        for trajectory, advantage in zip(trajectories, advantages)
    ]

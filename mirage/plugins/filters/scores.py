"""What filters rank prompt groups by: reward variance (or std), policy entropy, length."""

from __future__ import annotations

import math
import statistics

from mirage.core.rl.batch import Batch, Group, Trajectory


def group_scores(batch: Batch, score: str) -> list[float]:
    """[P] per-group reward variance (the paper's RV, PAPER.md section 4) or reward std
    (what the reference code ranks by, PAPER.md section 6)."""
    if score not in ("variance", "std"):
        raise ValueError(f"score must be 'variance' or 'std', got {score!r}")
    values = [g.reward_variance for g in batch.groups]
    if score == "std":
        values = [math.sqrt(v) for v in values]
    return values


def eligible_groups(batch: Batch, include_zero: bool) -> list[bool]:
    """[P] which groups a ranking filter may keep: with ``include_zero`` False, not the
    groups whose G returns are all equal (their GRPO advantages are all 0, so they would
    add only the regulariser to the update, PAPER.md section 3)."""
    return [include_zero or g.reward_variance != 0 for g in batch.groups]


def trajectory_entropy(trajectory: Trajectory) -> float:
    """Mean of -log p over the trajectory's response tokens, from the old log-probs the
    score stage filled: a one-sample estimate of the policy's per-token entropy along
    its own samples (E[-log p(y)] = H). NaN for a trajectory without response tokens."""
    values = []
    for turn in trajectory.turns:
        if turn.response_ids and turn.old_logprobs is None:
            raise ValueError("the entropy filter needs old log-probs; the score stage did not fill them")
        values.extend(-lp for lp in turn.old_logprobs or [])
    return statistics.fmean(values) if values else math.nan


def mean_entropy(group: Group) -> float:
    """Mean over the group's trajectories of :func:`trajectory_entropy` (each trajectory
    weighs the same however many tokens it has, like the loss's seq-mean-token-mean)."""
    values = [e for e in map(trajectory_entropy, group.trajectories) if not math.isnan(e)]
    return statistics.fmean(values) if values else 0.0


def mean_response_tokens(group: Group) -> float:
    """Mean over the group's trajectories of the policy tokens generated in all turns
    (a trajectory is one sequence, as in RAGEN's response length)."""
    if not group.trajectories:
        return 0.0
    return statistics.fmean(sum(len(t.response_ids) for t in traj.turns) for traj in group.trajectories)

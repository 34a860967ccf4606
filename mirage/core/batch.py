"""The batch that flows through every stage: P prompt groups x G trajectories."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mirage.core.returns import episode_return, group_mean, group_variance


@dataclass
class Turn:
    """One model turn. ``context`` is X (the prompt text up to and including
    ``<think>``); ``response`` is everything generated after it; ``reasoning`` is Z."""

    context: str
    response: str
    reasoning: str
    answer: str
    actions: list[str]
    format_ok: bool
    reward: float
    context_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float] | None = None

    @property
    def response_mask(self) -> list[int]:
        """1 for every policy token of the response (environment text is never trained)."""
        return [1] * len(self.response_ids)


@dataclass
class Trajectory:
    """One episode of one prompt: its turns and outcome."""

    prompt_index: int
    sample_index: int
    seed: int
    turns: list[Turn] = field(default_factory=list)
    success: bool = False
    done: bool = False

    @property
    def episode_return(self) -> float:
        """The sum of the turn rewards, correctly rounded (:func:`~mirage.core.returns.episode_return`)."""
        return episode_return(turn.reward for turn in self.turns)


@dataclass
class Group:
    """All G trajectories of one prompt (one environment instance)."""

    prompt_index: int
    seed: int
    trajectories: list[Trajectory] = field(default_factory=list)
    kept: bool = True
    # Trajectory-level filters may keep a subset; None means all of them.
    kept_samples: list[int] | None = None

    @property
    def returns(self) -> list[float]:
        return [t.episode_return for t in self.trajectories]

    @property
    def reward_mean(self) -> float:
        return group_mean(self.returns)

    @property
    def reward_variance(self) -> float:
        """RV(x): unbiased within-prompt variance of episode returns (PAPER.md section 4);
        exactly 0 when the returns are equal within :data:`~mirage.core.returns.RETURN_TOLERANCE`."""
        return group_variance(self.returns)

    @property
    def reward_std(self) -> float:
        return math.sqrt(self.reward_variance)

    def kept_trajectories(self) -> list[Trajectory]:
        if not self.kept:
            return []
        if self.kept_samples is None:
            return list(self.trajectories)
        return [self.trajectories[i] for i in self.kept_samples]


@dataclass
class Selection:
    """A filter's decision: kept group indices (and optional per-group samples)."""

    kept_groups: list[int]
    kept_samples: dict[int, list[int]] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Batch:
    """One iteration's rollouts. ``step`` is 1-based; validation batches use step 0."""

    step: int
    groups: list[Group]
    temperature: float = 1.0
    greedy: bool = False
    top_p: float = 1.0  # nucleus sampling (RolloutConfig.top_p); 1: off
    min_p: float = 0.0  # min-p sampling (RolloutConfig.min_p); 0: off
    # Set by the loop after filtering (FilterConfig.loss_scaling, step_size_matching);
    # the algorithm multiplies its advantages by it.
    loss_scale: float = 1.0

    @property
    def trajectories(self) -> list[Trajectory]:
        return [t for g in self.groups for t in g.trajectories]

    def apply(self, selection: Selection) -> None:
        kept = set(selection.kept_groups)
        for index, group in enumerate(self.groups):
            group.kept = index in kept
            group.kept_samples = selection.kept_samples.get(index)

    def kept_groups(self) -> list[Group]:
        return [g for g in self.groups if g.kept]

    @property
    def kept_ratio(self) -> float:
        return len(self.kept_groups()) / len(self.groups) if self.groups else 0.0

    def success_rate(self) -> float:
        trajs = self.trajectories
        return sum(t.success for t in trajs) / len(trajs) if trajs else math.nan

    def mean_return(self) -> float:
        trajs = self.trajectories
        return math.fsum(t.episode_return for t in trajs) / len(trajs) if trajs else math.nan


def make_batch(
    step: int, seeds: list[int], group_size: int, *, temperature: float, greedy: bool = False,
    top_p: float = 1.0, min_p: float = 0.0,
) -> Batch:
    """Empty groups for ``seeds`` (one environment instance each), G trajectories per
    group, each trajectory with its own transition seed."""
    groups = [
        Group(
            prompt_index=index,
            seed=seed,
            trajectories=[
                Trajectory(prompt_index=index, sample_index=k, seed=seed * 1009 + k)
                for k in range(group_size)
            ],
        )
        for index, seed in enumerate(seeds)
    ]
    return Batch(step=step, groups=groups, temperature=temperature, greedy=greedy,
                 top_p=top_p, min_p=min_p)

"""The batch that flows through every stage: P prompt groups x G trajectories."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mirage.core.rl.image import Image
from mirage.core.rl.prompt import Prompt
from mirage.core.rl.returns import episode_return, group_mean, group_variance


@dataclass
class Turn:
    """One model turn: what the policy saw, what it wrote, and what that did."""

    context: str
    """X: the prompt text up to and including ``<think>`` (docs/writing-an-environment.md
    shows what the platform wraps around the observation)."""
    response: str
    """Everything the policy generated after ``<think>``."""
    reasoning: str
    """Z: the text before ``</think>`` (what the MI diagnostics measure)."""
    answer: str
    """The body of ``<answer> ... </answer>``; empty when the response was malformed."""
    actions: list[str]
    """The actions the environment applied this turn (at most ``env.max_actions_per_turn``)."""
    format_ok: bool
    """False when the answer was malformed or not actions (the turn got ``env.format_penalty``)."""
    reward: float
    """The sum of the applied actions' rewards, plus the format penalty if any."""
    context_ids: list[int]
    """``context`` as token ids."""
    response_ids: list[int]
    """``response`` as token ids (the tokens the update trains)."""
    old_logprobs: list[float] | None = None
    """Log-probability of each response token under the sampling policy; filled by the
    score stage, None before it."""
    images: list[Image] = field(default_factory=list)
    """The pictures X shows, one per ``IMAGE_MARK`` in ``context``, in order (an
    environment in image mode); empty for text."""

    @property
    def prompt(self) -> Prompt:
        """X as a backend takes it: ``context_ids`` with ``images``."""
        return Prompt(self.context_ids, self.images)


@dataclass
class Trajectory:
    """One episode of one prompt: its turns and outcome."""

    prompt_index: int
    """The index of its group in ``batch.groups``."""
    sample_index: int
    """Its index among the group's G trajectories."""
    seed: int
    """The transition seed (the G samples of one prompt share the instance, not the noise)."""
    turns: list[Turn] = field(default_factory=list)
    """The turns played, in order; empty before the rollout."""
    success: bool = False
    """Whether the environment reported success (its ``success`` after the last turn)."""
    done: bool = False
    """Whether the episode ended (solved, failed, out of actions or at ``env.max_turns``)."""

    @property
    def episode_return(self) -> float:
        """The sum of the turn rewards, correctly rounded (:func:`~mirage.core.rl.returns.episode_return`)."""
        return episode_return(turn.reward for turn in self.turns)


@dataclass
class Group:
    """All G trajectories of one prompt (one environment instance)."""

    prompt_index: int
    """Its index in ``batch.groups``."""
    seed: int
    """The environment seed: every trajectory of the group plays this instance."""
    trajectories: list[Trajectory] = field(default_factory=list)
    """The G trajectories."""
    kept: bool = True
    """Set by the loop from the filter's selection; read it after the filter stage only."""
    kept_samples: list[int] | None = None
    """The kept trajectory indices when a trajectory-level filter kept a subset; None: all."""

    @property
    def returns(self) -> list[float]:
        """The G episode returns, in trajectory order."""
        return [t.episode_return for t in self.trajectories]

    @property
    def reward_mean(self) -> float:
        """The mean episode return of the group."""
        return group_mean(self.returns)

    @property
    def reward_variance(self) -> float:
        """RV(x): unbiased within-prompt variance of episode returns (PAPER.md section 4);
        exactly 0 when the returns are equal within :data:`~mirage.core.rl.returns.RETURN_TOLERANCE`."""
        return group_variance(self.returns)

    @property
    def reward_std(self) -> float:
        """The square root of :attr:`reward_variance`."""
        return math.sqrt(self.reward_variance)

    def kept_trajectories(self) -> list[Trajectory]:
        """The trajectories the update will see: none if the group was dropped."""
        if not self.kept:
            return []
        if self.kept_samples is None:
            return list(self.trajectories)
        return [self.trajectories[i] for i in self.kept_samples]


@dataclass
class Selection:
    """A filter's decision: kept group indices (and optional per-group samples)."""

    kept_groups: list[int]
    """Indices into ``batch.groups`` to keep: unique integers in ``0..P-1``."""
    kept_samples: dict[int, list[int]] = field(default_factory=dict)
    """Optional: for a kept group, the trajectory indices (``0..G-1``) to keep; a group
    not listed keeps all of them."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The filter's own metrics, stored under these names (see Metrics below)."""


@dataclass
class Batch:
    """One iteration's rollouts. ``step`` is 1-based; validation batches use step 0."""

    step: int
    """The iteration, from 1; 0 for validation batches."""
    groups: list[Group]
    """The P prompt groups."""
    temperature: float = 1.0
    """The sampling temperature of this batch."""
    greedy: bool = False
    """True for greedy validation batches."""
    top_p: float = 1.0
    """Nucleus sampling (``rollout.top_p``); 1: off."""
    min_p: float = 0.0
    """Min-p sampling (``rollout.min_p``); 0: off."""
    sampling_seed: int | None = None
    """Set in data-parallel runs (``model.parallel``): each trajectory's turns sample from
    their own random streams (:meth:`row_seed`), so the batch is the same however many
    processes share it. None: the global torch generator, seeded per step."""
    loss_scale: float = 1.0
    """Set by the loop after filtering (``loss_scaling``, ``step_size_matching``);
    the algorithm multiplies its advantages by it."""

    def row_seed(self, trajectory: Trajectory, turn: int) -> int | None:
        """The sampling seed of ``trajectory``'s turn ``turn`` (from 0): from the batch's
        :attr:`sampling_seed`, the trajectory's own seed and index, and the turn; None when
        the batch has no sampling seed."""
        if self.sampling_seed is None:
            return None
        key = [self.sampling_seed, trajectory.seed, trajectory.sample_index, turn]
        return int(np.random.SeedSequence(key).generate_state(1)[0])

    @property
    def trajectories(self) -> list[Trajectory]:
        """Every trajectory of every group, group by group."""
        return [t for g in self.groups for t in g.trajectories]

    def apply(self, selection: Selection) -> None:
        """Mark the groups and samples ``selection`` keeps (the loop does this; a filter must not)."""
        kept = set(selection.kept_groups)
        for index, group in enumerate(self.groups):
            group.kept = index in kept
            group.kept_samples = selection.kept_samples.get(index)

    def kept_groups(self) -> list[Group]:
        """The groups the filter kept."""
        return [g for g in self.groups if g.kept]

    @property
    def kept_ratio(self) -> float:
        """The kept share of the groups (0 for an empty batch)."""
        return len(self.kept_groups()) / len(self.groups) if self.groups else 0.0

    def success_rate(self) -> float:
        """The share of trajectories that succeeded (NaN for an empty batch)."""
        trajs = self.trajectories
        return sum(t.success for t in trajs) / len(trajs) if trajs else math.nan

    def mean_return(self) -> float:
        """The mean episode return over all trajectories (NaN for an empty batch)."""
        trajs = self.trajectories
        return math.fsum(t.episode_return for t in trajs) / len(trajs) if trajs else math.nan


def make_batch(
    step: int, seeds: list[int], group_size: int, *, temperature: float, greedy: bool = False,
    top_p: float = 1.0, min_p: float = 0.0, sampling_seed: int | None = None,
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
                 top_p=top_p, min_p=min_p, sampling_seed=sampling_seed)

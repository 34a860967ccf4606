"""DAPO's two additions to the update: dynamic sampling and the overlong penalty.

Dynamic sampling (Yu et al. 2025, section 3.2): a group whose trajectories all have the
same return gives every one of them advantage 0, so it is dropped, and the batch is
refilled with fresh groups from extra rollout rounds (P prompts each, new seeds) until
it holds as many groups as the filter kept, or ``extra_rollout_rounds`` are spent. The
criterion is the environment's return, before the overlong penalty (veRL's ``acc``
metric). Extra groups pass this criterion only, not the run's filter.

Soft overlong punishment (section 3.4; veRL's DAPO reward manager): a response of L
tokens with budget ``max_new_tokens`` gets ``min(0, -(L - (max - buffer)) / buffer *
penalty)`` added to its turn's reward: nothing up to ``max - buffer``, then linearly
down to ``-penalty`` at the budget (a truncated response). Each turn is one response.
"""

from __future__ import annotations

import numpy as np

from mirage.core.config.run_config import AlgorithmConfig, RunConfig
from mirage.core.rl.batch import Batch, Group, Trajectory, make_batch
from mirage.core.rl.returns import returns_equal
from mirage.core.run.scoring import score_batch
from mirage.core.run.stages import rollout


def overlong_penalty(length: int, max_new_tokens: int, buffer: int, penalty: float) -> float:
    """The reward added to a response of ``length`` tokens (0 or negative)."""
    expected = max_new_tokens - buffer
    return min(-(length - expected) / buffer * penalty, 0.0)


def turn_rewards(trajectories: list[Trajectory], settings: AlgorithmConfig,
                 max_new_tokens: int) -> tuple[list[list[float]], dict[str, float]]:
    """Each turn's reward for the advantage estimator: the environment's, plus the
    overlong penalty when ``settings.overlong_penalty`` is set (with its metrics)."""
    rewards = [[turn.reward for turn in t.turns] for t in trajectories]
    if settings.overlong_penalty is None:
        return rewards, {}
    penalties = [
        [overlong_penalty(len(turn.response_ids), max_new_tokens, settings.overlong_buffer,
                          settings.overlong_penalty) for turn in t.turns]
        for t in trajectories
    ]
    shaped = [[r + p for r, p in zip(rs, ps)] for rs, ps in zip(rewards, penalties)]
    flat = [p for ps in penalties for p in ps]
    metrics = {
        "update/overlong_turns": sum(p < 0 for p in flat) / max(len(flat), 1),
        "update/overlong_penalty": sum(flat) / max(len(trajectories), 1),
    }
    return shaped, metrics


def has_signal(group: Group) -> bool:
    """Do the group's kept trajectories differ in return (non-zero group advantage)?
    Returns equal within :func:`~mirage.core.rl.returns.returns_equal` do not."""
    return not returns_equal([t.episode_return for t in group.kept_trajectories()])


def dynamic_sampling(run, batch: Batch, config: RunConfig) -> tuple[list[Group], dict[str, float]]:
    """The kept groups with signal, refilled from extra rollout rounds; with metrics."""
    target = len(batch.kept_groups())
    groups = [g for g in batch.kept_groups() if has_signal(g)]
    dropped = target - len(groups)
    rounds = 0
    while len(groups) < target and rounds < config.algorithm.extra_rollout_rounds:
        rounds += 1
        # Own seed stream per (run, step, round): prompts never repeat the step's own.
        seeds = np.random.SeedSequence([config.seed, batch.step, rounds, 0xDA90])
        extra = make_batch(batch.step, [int(s) for s in seeds.generate_state(config.rollout.prompts)],
                           config.rollout.group_size, temperature=batch.temperature,
                           top_p=batch.top_p, min_p=batch.min_p, sampling_seed=batch.sampling_seed)
        rollout(run, extra, "dynamic sampling")  # shared across the ranks as the step's own
        score_batch(run, extra)
        fresh = [g for g in extra.groups if has_signal(g)]
        dropped += len(extra.groups) - len(fresh)
        groups += fresh
    return groups[:target], {
        "update/extra_rollout_rounds": float(rounds),
        "update/dropped_groups": float(dropped),
    }

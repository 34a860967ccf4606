"""The update every algorithm runs: shaped rewards, advantages, then epochs x mini-batches.

Multi-turn credit assignment: each turn of a trajectory is one training row whose
context is the environment's text (and any history) and whose response is the policy's
own tokens; only response tokens carry loss (``PolicyOutput.mask``), environment text
never does. The advantage estimator named by ``algorithm.adv_estimator`` (a registry:
``gae``, ``grpo`` or a plugin's) gives every response token its advantage; the loss
aggregation treats a whole trajectory as veRL's "sequence"
(:func:`~mirage.plugins.verl_algorithms.common.token_weights`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from pydantic import BaseModel

from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.components import Algorithm
from mirage.core.rl.batch import Batch, Group, Trajectory
from mirage.core.rl.returns import episode_return
from mirage.plugins.verl_algorithms.common import Row, token_weights
from mirage.plugins.verl_algorithms.dapo import dynamic_sampling, turn_rewards
from mirage.plugins.verl_algorithms.loss import ClippedPolicyLoss
from mirage.plugins.verl_algorithms.outcome import verl_zero_variance_mass

if TYPE_CHECKING:
    from mirage.core.plugin_api.session import RunSession
    from mirage.core.rl.backend import Backend


def mini_batches(permutation: list[int], size: int, count: int | None) -> list[list[int]]:
    """``permutation`` cut into consecutive mini-batches: of ``size`` trajectories each
    (the last may be smaller) when ``count`` is None, else exactly ``count`` of near-equal
    sizes (fewer only when there are fewer trajectories), so the number of optimizer
    steps does not depend on how many trajectories a filter kept
    (``AlgorithmConfig.mini_batches``)."""
    if count is None:
        return [permutation[start : start + size] for start in range(0, len(permutation), size)]
    count = min(count, len(permutation))
    if count == 0:
        return []
    bounds = [len(permutation) * k // count for k in range(count + 1)]
    return [permutation[low:high] for low, high in zip(bounds, bounds[1:])]


class PolicyGradient(Algorithm):
    """Clipped policy gradient whose estimator, aggregation, clip bounds, sampling and
    reward shaping are the run's resolved :class:`AlgorithmConfig` settings. A subclass
    is an algorithm by its ``preset``; one without a preset needs
    ``algorithm.adv_estimator`` set."""

    def __init__(self, config: RunConfig, options: BaseModel):
        super().__init__(config, options)
        self.settings = config.algorithm
        self._estimator: Any = None

    @classmethod
    def config_problem(cls, config: RunConfig, backend_cls: type["Backend"]) -> str | None:
        """Why this algorithm cannot run ``config`` with ``backend_cls``, in one line."""
        if config.algorithm.adv_estimator is None:
            return (f"algorithm {config.algorithm.name!r} names no advantage estimator: set "
                    "algorithm.adv_estimator (core plugins lists the estimators)")
        return None

    def training_groups(self, run: "RunSession", batch: Batch) -> tuple[list[Group], dict[str, float]]:
        """The groups to train on: the filter's, refilled by dynamic sampling if on."""
        if self.settings.dynamic_sampling:
            return dynamic_sampling(run, batch, self.config)
        return batch.kept_groups(), {}

    def update(self, run: "RunSession", batch: Batch) -> dict[str, Any]:
        """Epochs x mini-batches of kept trajectories, one optimizer step per mini-batch."""
        algo = self.settings
        groups, metrics = self.training_groups(run, batch)
        trajectories = [t for g in groups for t in g.kept_trajectories()]
        index = [i for i, g in enumerate(groups) for _ in g.kept_trajectories()]
        rewards, shaping = turn_rewards(trajectories, algo, self.config.rollout.max_new_tokens)
        metrics |= shaping
        metrics["update/trajectories"] = float(len(trajectories))
        if not trajectories:  # dynamic sampling found only zero-variance groups
            return metrics | {"update/optimizer_steps": 0.0}
        rows = self.rows(run, trajectories, index, rewards)
        scale = batch.loss_scale  # the loop's scaling after filtering (RunConfig.loss_scaling)
        rows = [[replace(r, advantages=r.advantages * scale) for r in turns] for turns in rows]
        order = torch.Generator().manual_seed(self.config.seed * 100_003 + batch.step)
        totals: dict[str, float] = {}
        steps = 0
        for _ in range(algo.epochs):
            permutation = torch.randperm(len(trajectories), generator=order).tolist()
            for chosen in mini_batches(permutation, algo.mini_batch_size, algo.mini_batches):
                weights = token_weights(
                    [[len(turn.response_ids) for turn in trajectories[i].turns] for i in chosen],
                    algo.loss_agg_mode,
                )
                mini = [replace(r, weight=w) for i, w in zip(chosen, weights) for r in rows[i]]
                for name, value in self._mini_batch(run, mini).items():
                    totals[name] = totals.get(name, 0.0) + value
                steps += 1
        metrics |= {name: value / max(steps, 1) for name, value in totals.items()}
        metrics["update/optimizer_steps"] = float(steps)
        per_trajectory = [torch.cat([r.advantages for r in turns]).abs().mean() for turns in rows if turns]
        metrics["update/advantage_abs_mean"] = float(torch.stack(per_trajectory).mean()) if per_trajectory else 0.0
        if algo.adv_estimator == "grpo":  # what the reference's float32 estimator adds
            metrics["update/verl_zero_variance_advantage_mass"] = scale * verl_zero_variance_mass(
                [episode_return(r) for r in rewards], index, algo.norm_adv_by_std)
        return metrics

    def rows(self, run: "RunSession", trajectories: list[Trajectory], groups: list[int],
             rewards: list[list[float]]) -> list[list[Row]]:
        """Per trajectory, its turns with response tokens as rows with advantages (before
        the loss scale). ``groups[i]`` numbers trajectory i's prompt group; ``rewards[i]``
        are its turn rewards after shaping: the estimator's (``algorithm.adv_estimator``)."""
        if self._estimator is None:
            estimator_cls = run.plugins.registries.estimators.get(self.settings.adv_estimator)
            self._estimator = estimator_cls(self.config)
        return self._estimator.rows(run, trajectories, groups, rewards)

    # ------------------------------------------------------------------ gradient decomposition
    def advantage_rows(self, run: "RunSession", groups: list[Group]) -> list[list[Row]]:
        """Per trajectory of ``groups`` (all of each group's trajectories, in order), its
        training rows with advantages computed over all of them as the update would
        (reward shaping included; no loss scale). Builds PPO's critic on first use,
        exactly as the update does."""
        trajectories = [t for g in groups for t in g.trajectories]
        index = [i for i, g in enumerate(groups) for _ in g.trajectories]
        rewards, _ = turn_rewards(trajectories, self.settings, self.config.rollout.max_new_tokens)
        return self.rows(run, trajectories, index, rewards)

    def mini_batch_rows(self, rows: list[list[Row]]) -> list[Row]:
        """The trajectories ``rows`` (from :meth:`advantage_rows`) as one mini-batch: their
        rows, flattened, each with its trajectory's token weight (the loss aggregation)."""
        weights = token_weights([[len(r.turn.response_ids) for r in turns] for turns in rows],
                                self.settings.loss_agg_mode)
        return [replace(r, weight=w) for turns, w in zip(rows, weights) for r in turns]

    def loss_recipe(self) -> ClippedPolicyLoss:
        """What the backend's ``train_step`` and ``loss_gradients`` compute the loss with."""
        return ClippedPolicyLoss(self.settings)

    def _mini_batch(self, run: "RunSession", rows: list[Row]) -> dict[str, float]:
        """One optimizer step over ``rows``, run by the backend."""
        return run.backend.train_step(rows, self.loss_recipe())

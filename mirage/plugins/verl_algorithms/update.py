"""The update every algorithm runs: shaped rewards, advantages, then epochs x mini-batches.

Multi-turn credit assignment: each turn of a trajectory is one training row whose
context is the environment's text (and any history) and whose response is the policy's
own tokens; only response tokens carry loss (``PolicyOutput.mask``), environment text
never does. The advantage estimator (``outcome`` or ``ppo``) gives every response token
its advantage; the loss aggregation treats a whole trajectory as veRL's "sequence"
(:func:`~mirage.plugins.verl_algorithms.common.token_weights`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterator

import torch

from mirage.core.batch import Batch, Group, Trajectory
from mirage.core.config import RunConfig
from mirage.core.returns import episode_return
from mirage.plugins.verl_algorithms.common import (
    Row, actor_loss, core_algos, critic_loss, pad, token_weights,
)
from mirage.plugins.verl_algorithms.dapo import dynamic_sampling, turn_rewards
from mirage.plugins.verl_algorithms.outcome import outcome_rows, verl_zero_variance_mass
from mirage.plugins.verl_algorithms.ppo import gae_rows

if TYPE_CHECKING:
    from mirage.core.backend import Backend
    from mirage.core.session import RunSession


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


class PolicyGradient:
    """Clipped policy gradient whose estimator, aggregation, clip bounds, sampling and
    reward shaping are the run's resolved :class:`AlgorithmConfig` settings."""

    def __init__(self, config: RunConfig):
        self.config = config
        self.settings = config.algorithm

    @classmethod
    def config_problem(cls, config: RunConfig, backend_cls: type["Backend"]) -> str | None:
        """Why this algorithm cannot run ``config`` with ``backend_cls``, in one line."""
        algo = config.algorithm
        if algo.adv_estimator == "gae" and not getattr(backend_cls, "supports_critic", False):
            return (
                f"algorithm {algo.name!r} estimates advantages with GAE, which needs a critic, "
                f"but backend {config.model.backend!r} provides none; use --algo grpo, drgrpo "
                "or dapo, or set algorithm.adv_estimator: grpo"
            )
        return None

    def training_groups(self, run: "RunSession", batch: Batch) -> tuple[list[Group], dict[str, float]]:
        """The groups to train on: the filter's, refilled by dynamic sampling if on."""
        if self.settings.dynamic_sampling:
            return dynamic_sampling(run, batch, self.config)
        return batch.kept_groups(), {}

    def update(self, run: "RunSession", batch: Batch) -> dict[str, Any]:
        """Epochs x mini-batches of kept trajectories, one optimizer step per mini-batch."""
        algo = self.settings
        if algo.kl_coef > 0 and not run.backend.has_reference():
            run.backend.freeze_reference()
        groups, metrics = self.training_groups(run, batch)
        trajectories = [t for g in groups for t in g.kept_trajectories()]
        index = [i for i, g in enumerate(groups) for _ in g.kept_trajectories()]
        rewards, shaping = turn_rewards(trajectories, algo, self.config.rollout.max_new_tokens)
        metrics |= shaping
        metrics["update/trajectories"] = float(len(trajectories))
        if not trajectories:  # dynamic sampling found only zero-variance groups
            return metrics | {"update/optimizer_steps": 0.0}
        rows = self.rows(run, trajectories, index, rewards)
        scale = batch.loss_scale  # the loop's scaling after filtering (FilterConfig.loss_scaling)
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
        are its turn rewards after shaping. The one step a new estimator replaces."""
        if self.settings.adv_estimator == "gae":
            return gae_rows(run, trajectories, rewards, self.settings)
        return outcome_rows(trajectories, groups, rewards, self.settings)

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

    def loss_terms(self, run: "RunSession", rows: list[list[Row]]) -> Iterator[dict[str, torch.Tensor]]:
        """The loss of the trajectories ``rows`` (from :meth:`advantage_rows`), weighted
        as one mini-batch of them, split into its terms, one dict per micro-batch:
        ``task`` (the clipped policy loss), ``entropy`` (-entropy_coef x entropy) and,
        when kl_coef > 0, ``kl`` (kl_coef x KL). Each is a scalar with gradient; their
        sum over micro-batches is the loss the update backpropagates. Nothing is
        backpropagated and no optimizer steps."""
        algo = self.settings
        weights = token_weights([[len(r.turn.response_ids) for r in turns] for turns in rows],
                                algo.loss_agg_mode)
        flat = [replace(r, weight=w) for turns, w in zip(rows, weights) for r in turns]
        for start in range(0, len(flat), algo.micro_batch_size):
            losses = self._micro_losses(run, flat[start : start + algo.micro_batch_size])
            terms = {"task": losses["pg_loss"], "entropy": -algo.entropy_coef * losses["entropy"]}
            if "kl" in losses:
                terms["kl"] = algo.kl_coef * losses["kl"]
            yield terms

    def _micro_losses(self, run: "RunSession", micro: list[Row]) -> dict[str, Any]:
        """Forward ``micro`` and return its loss parts with gradient: ``pg_loss``,
        ``entropy`` (aggregated, before its coefficient), ``kl`` (before its
        coefficient; only when kl_coef > 0), and ``info`` (veRL's metrics), ``out``."""
        algo = self.settings
        agg_loss = core_algos().agg_loss
        contexts = [r.turn.context_ids for r in micro]
        responses = [r.turn.response_ids for r in micro]
        out = run.backend.forward(contexts, responses)
        width = out.mask.size(1)
        if all(r.turn.old_logprobs is not None for r in micro):
            old = pad([r.turn.old_logprobs for r in micro], width)
        else:
            old = out.logprobs.detach()
        weight = torch.tensor([r.weight for r in micro])[:, None] * out.mask
        advantages = pad([r.advantages for r in micro], width)
        pg_loss, info = actor_loss(old, out.logprobs, advantages, weight, out.mask, algo)
        losses = {"pg_loss": pg_loss, "info": info, "out": out,
                  "entropy": agg_loss(out.entropy * weight, out.mask, "token-sum")}
        if algo.kl_coef > 0:
            ref = run.backend.reference_logprobs(contexts, responses)
            kl = core_algos().kl_penalty(out.logprobs, ref, algo.kl_penalty)
            losses["kl"] = agg_loss(kl * weight, out.mask, "token-sum")
        return losses

    def _mini_batch(self, run: "RunSession", rows: list[Row]) -> dict[str, float]:
        """Accumulate the weighted loss of ``rows`` over micro-batches, then step."""
        algo = self.settings
        critic = bool(rows) and rows[0].returns is not None
        tokens = sum(len(r.turn.response_ids) for r in rows)
        totals = {"update/pg_loss": 0.0, "update/entropy": 0.0, "update/kl": 0.0, "update/clipfrac": 0.0}
        if critic:
            totals |= {"update/value_loss": 0.0, "update/value_clipfrac": 0.0}
        for start in range(0, len(rows), algo.micro_batch_size):
            micro = rows[start : start + algo.micro_batch_size]
            contexts = [r.turn.context_ids for r in micro]
            responses = [r.turn.response_ids for r in micro]
            losses = self._micro_losses(run, micro)
            pg_loss, entropy, info, out = losses["pg_loss"], losses["entropy"], losses["info"], losses["out"]
            width = out.mask.size(1)
            loss = pg_loss - algo.entropy_coef * entropy
            if "kl" in losses:
                loss = loss + algo.kl_coef * losses["kl"]
                totals["update/kl"] += losses["kl"].item()
            loss.backward()
            share = len(micro) / len(rows)
            totals["update/pg_loss"] += pg_loss.item()
            totals["update/entropy"] += entropy.item()
            totals["update/clipfrac"] += info["actor/pg_clipfrac"] * share
            if critic:
                values = run.backend.values(contexts, responses)
                value_loss, clipfrac = critic_loss(
                    values, pad([r.old_values for r in micro], width),
                    pad([r.returns for r in micro], width), out.mask, algo.value_clip, tokens,
                )
                value_loss.backward()
                totals["update/value_loss"] += value_loss.item()
                totals["update/value_clipfrac"] += clipfrac * share
        totals["update/grad_norm"] = run.backend.optimizer_step(algo.max_grad_norm)
        if critic:
            totals["update/critic_grad_norm"] = run.backend.critic_step(algo.max_grad_norm)
        return totals

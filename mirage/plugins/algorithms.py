"""Update algorithms assembled from veRL's ``core_algos`` (GRPO here).

Multi-turn credit assignment: every turn of a trajectory is one training row whose
context is the environment text and whose response tokens are the policy's own; only
response tokens carry loss (the mask), environment text never does. GRPO's outcome
advantage is computed once per trajectory from its episode return, normalised within
its prompt group, and copied to every response token of every turn.

Loss aggregation is over trajectories, as in RAGEN where a whole multi-turn trajectory
is one sequence: ``seq-mean-token-mean`` gives every trajectory the same weight however
many turns it took. A trajectory spans several rows here, so the aggregation is folded
into per-token weights (:func:`token_weights`) and veRL's losses sum them
(``token-sum``). Without this, trajectories with more turns (usually failures) would
outweigh short successes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mirage.core.batch import Batch, Trajectory
from mirage.core.config import RunConfig
from mirage.core.hookspecs import hookimpl


def _core_algos():
    # veRL imports Ray at package import (~6 s); only pay for it when updating.
    from verl.trainer.ppo import core_algos

    return core_algos


def _actor_config(clip_low: float, clip_high: float):
    from verl.workers.config import ActorConfig

    config = ActorConfig(
        strategy="fsdp",
        clip_ratio=clip_low,
        clip_ratio_low=clip_low,
        clip_ratio_high=clip_high,
        ppo_mini_batch_size=1,
        ppo_micro_batch_size_per_gpu=1,
        use_dynamic_bsz=False,
        rollout_n=1,
    )
    config.global_batch_info.update(dp_size=1)
    return config


def token_weights(lengths: list[list[int]], mode: str) -> list[float]:
    """Per-trajectory token weight that makes a weighted token sum equal ``mode``.

    ``lengths[i]`` lists the response lengths of trajectory i's turns. Modes follow
    veRL's ``agg_loss``, with a trajectory as the sequence: token-mean (all tokens of
    the mini-batch equal), seq-mean-token-mean (mean over trajectories of each one's
    token mean), seq-mean-token-sum (mean over trajectories of token sums), token-sum.
    """
    totals = [sum(turns) for turns in lengths]
    count = sum(1 for t in totals if t > 0)
    if mode == "token-mean":
        return [1.0 / max(sum(totals), 1)] * len(totals)
    if mode == "seq-mean-token-mean":
        return [1.0 / (count * t) if t else 0.0 for t in totals]
    if mode == "seq-mean-token-sum":
        return [1.0 / count if t else 0.0 for t in totals]
    if mode == "token-sum":
        return [1.0] * len(totals)
    raise ValueError(
        f"unknown loss_agg_mode {mode!r}; valid: token-mean, seq-mean-token-mean, "
        "seq-mean-token-sum, token-sum"
    )


def _pad(rows: list[list[float]], width: int) -> torch.Tensor:
    return torch.stack([F.pad(torch.tensor(r, dtype=torch.float32), (0, width - len(r))) for r in rows])


class GRPO:
    """Group-normalised outcome advantage + clipped policy loss, seq-mean-token-mean."""

    default_loss_agg_mode = "seq-mean-token-mean"

    def __init__(self, config: RunConfig):
        self.config = config
        self.loss_agg_mode = config.algorithm.loss_agg_mode or self.default_loss_agg_mode

    def trajectory_advantages(self, trajectories: list[Trajectory]) -> torch.Tensor:
        """[N] advantage per trajectory from veRL's GRPO outcome estimator."""
        returns = torch.tensor([[t.episode_return] for t in trajectories], dtype=torch.float32)
        index = np.array([t.prompt_index for t in trajectories])
        advantages, _ = _core_algos().compute_grpo_outcome_advantage(
            token_level_rewards=returns,
            response_mask=torch.ones_like(returns),
            index=index,
            norm_adv_by_std_in_grpo=self.config.algorithm.norm_adv_by_std,
        )
        return advantages[:, 0]

    def update(self, run, batch: Batch) -> dict[str, Any]:
        """Epochs x mini-batches of kept trajectories, one optimizer step per mini-batch."""
        algo = self.config.algorithm
        if algo.kl_coef > 0 and not run.backend.has_reference():
            run.backend.freeze_reference()
        trajectories = [t for g in batch.kept_groups() for t in g.kept_trajectories()]
        advantages = self.trajectory_advantages(trajectories)
        order = torch.Generator().manual_seed(self.config.seed * 100_003 + batch.step)
        totals: dict[str, float] = {}
        steps = 0
        for _ in range(algo.epochs):
            permutation = torch.randperm(len(trajectories), generator=order).tolist()
            for start in range(0, len(permutation), algo.mini_batch_size):
                chosen = permutation[start : start + algo.mini_batch_size]
                weights = token_weights(
                    [[len(turn.response_ids) for turn in trajectories[i].turns] for i in chosen],
                    self.loss_agg_mode,
                )
                rows = [
                    (turn, float(advantages[i]), weight)
                    for i, weight in zip(chosen, weights)
                    for turn in trajectories[i].turns
                    if turn.response_ids
                ]
                for name, value in self._mini_batch(run, rows).items():
                    totals[name] = totals.get(name, 0.0) + value
                steps += 1
        metrics = {name: value / max(steps, 1) for name, value in totals.items()}
        metrics["update/optimizer_steps"] = float(steps)
        metrics["update/trajectories"] = float(len(trajectories))
        metrics["update/advantage_abs_mean"] = float(advantages.abs().mean()) if len(advantages) else 0.0
        return metrics

    def _mini_batch(self, run, rows: list[tuple[Any, float, float]]) -> dict[str, float]:
        """Accumulate the weighted loss of ``rows`` over micro-batches, then step."""
        algo = self.config.algorithm
        core_algos = _core_algos()
        actor = _actor_config(algo.clip_ratio, algo.clip_ratio)
        policy_loss = core_algos.get_policy_loss_fn("vanilla")
        totals = {"update/pg_loss": 0.0, "update/entropy": 0.0, "update/kl": 0.0, "update/clipfrac": 0.0}
        for start in range(0, len(rows), algo.micro_batch_size):
            micro = rows[start : start + algo.micro_batch_size]
            contexts = [turn.context_ids for turn, _, _ in micro]
            responses = [turn.response_ids for turn, _, _ in micro]
            out = run.backend.forward(contexts, responses)
            if all(turn.old_logprobs is not None for turn, _, _ in micro):
                old = _pad([turn.old_logprobs for turn, _, _ in micro], out.mask.size(1))
            else:
                old = out.logprobs.detach()
            weight = torch.tensor([w for _, _, w in micro])[:, None] * out.mask
            advantage = torch.tensor([a for _, a, _ in micro])[:, None] * weight
            pg_loss, info = policy_loss(old, out.logprobs, advantage, out.mask, "token-sum", actor)
            entropy = core_algos.agg_loss(out.entropy * weight, out.mask, "token-sum")
            loss = pg_loss - algo.entropy_coef * entropy
            if algo.kl_coef > 0:
                ref = run.backend.reference_logprobs(contexts, responses)
                kl = core_algos.kl_penalty(out.logprobs, ref, algo.kl_penalty)
                kl_loss = core_algos.agg_loss(kl * weight, out.mask, "token-sum")
                loss = loss + algo.kl_coef * kl_loss
                totals["update/kl"] += kl_loss.item()
            loss.backward()
            totals["update/pg_loss"] += pg_loss.item()
            totals["update/entropy"] += entropy.item()
            totals["update/clipfrac"] += info["actor/pg_clipfrac"] * len(micro) / len(rows)
        totals["update/grad_norm"] = run.backend.optimizer_step(algo.max_grad_norm)
        return totals


@hookimpl
def mirage_register_algorithms(register):
    register("grpo", GRPO)

"""What every algorithm shares: training rows, loss weights and the losses."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from mirage.core.config.run_config import AlgorithmConfig
from mirage.core.rl.training import Row  # noqa: F401  (where algorithms import it from)


def core_algos():
    # veRL imports Ray at package import (~6 s); only pay for it when updating.
    from verl.trainer.ppo import core_algos

    return core_algos


def actor_config(settings: AlgorithmConfig):
    """A veRL ActorConfig carrying the clip bounds its policy losses read."""
    from verl.workers.config import ActorConfig

    config = ActorConfig(
        strategy="fsdp",
        clip_ratio=settings.clip_ratio_low,
        clip_ratio_low=settings.clip_ratio_low,
        clip_ratio_high=settings.clip_ratio_high,
        clip_ratio_c=settings.clip_ratio_c,
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
    A trajectory spans several rows, so the aggregation is folded into weights and the
    losses are token sums; without this, trajectories with more turns (usually
    failures) would outweigh short successes under seq-mean-token-mean.
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


def pad(rows: Sequence[Sequence[float] | torch.Tensor], width: int) -> torch.Tensor:
    """``[B, width]`` float tensor, each row right-padded with zeros."""
    tensors = [torch.as_tensor(r, dtype=torch.float32) for r in rows]
    return torch.stack([F.pad(t, (0, width - t.numel())) for t in tensors])


def actor_loss(old_logprobs: torch.Tensor, logprobs: torch.Tensor, advantages: torch.Tensor,
               weights: torch.Tensor, mask: torch.Tensor, settings: AlgorithmConfig):
    """Weighted clipped policy loss: sum over tokens of weight x veRL's vanilla PPO term.

    All tensors ``[B, L]``. The weights are positive, so
    ``w * max(-A r, -A clip(r)) = max(-(wA) r, -(wA) clip(r))`` (likewise the dual
    clip): they fold into the advantages and veRL aggregates with token-sum. Returns
    (loss, veRL's metrics dict).
    """
    policy_loss = core_algos().get_policy_loss_fn("vanilla")
    return policy_loss(old_logprobs, logprobs, advantages * weights, mask, "token-sum",
                       actor_config(settings))


def critic_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                mask: torch.Tensor, value_clip: float, tokens: int):
    """Clipped value loss ``0.5 * max((V - R)^2, (clip(V, V_old +- c) - R)^2)``, summed
    over ``mask`` and divided by ``tokens`` (the mini-batch's token count: veRL's
    token-mean over micro-batches). Tensors ``[B, L]``; returns (loss, clip fraction)."""
    loss, clipfrac = core_algos().compute_value_loss(
        values, returns, old_values, mask, value_clip, "token-mean", batch_num_tokens=tokens
    )
    return loss, float(clipfrac)

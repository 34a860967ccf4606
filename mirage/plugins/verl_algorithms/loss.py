"""The built-in algorithms' loss recipe (the training seam's :class:`LossRecipe`).

veRL's clipped policy loss with the trajectory weights folded in, an entropy bonus, an
optional KL penalty to the reference policy and, when rows carry returns, the clipped
value loss. It holds only the resolved settings, so a backend may ship it to another
process. The rows' tensors live on the CPU; the recipe moves them to the device of the
policy's outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mirage.core.config.run_config import AlgorithmConfig
from mirage.core.rl.backend import PolicyOutput
from mirage.core.rl.training import Row
from mirage.plugins.verl_algorithms.common import actor_loss, core_algos, critic_loss, pad


@dataclass(frozen=True)
class ClippedPolicyLoss:
    settings: AlgorithmConfig

    @property
    def micro_batch_size(self) -> int:
        return self.settings.micro_batch_size

    @property
    def max_grad_norm(self) -> float:
        return self.settings.max_grad_norm

    @property
    def needs_reference(self) -> bool:
        return self.settings.kl_coef > 0

    def policy_terms(self, out: PolicyOutput, rows: Sequence[Row], reference: torch.Tensor | None,
                     share: float) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """``task`` (the clipped policy loss), ``entropy`` (-entropy_coef x entropy) and,
        with a KL penalty, ``kl`` (kl_coef x KL); stats: the terms before their
        coefficients and the clip fraction."""
        algo = self.settings
        agg_loss = core_algos().agg_loss
        width, device = out.mask.size(1), out.mask.device
        if all(r.turn.old_logprobs is not None for r in rows):
            old = pad([r.turn.old_logprobs for r in rows], width).to(device)
        else:
            old = out.logprobs.detach()
        weight = torch.tensor([r.weight for r in rows], device=device)[:, None] * out.mask
        advantages = pad([r.advantages for r in rows], width).to(device)
        pg_loss, info = actor_loss(old, out.logprobs, advantages, weight, out.mask, algo)
        entropy = agg_loss(out.entropy * weight, out.mask, "token-sum")
        terms = {"task": pg_loss, "entropy": -algo.entropy_coef * entropy}
        stats = {"pg_loss": pg_loss.item(), "entropy": entropy.item(), "kl": 0.0,
                 "clipfrac": info["actor/pg_clipfrac"] * share}
        if reference is not None:
            kl = agg_loss(core_algos().kl_penalty(out.logprobs, reference, algo.kl_penalty) * weight,
                          out.mask, "token-sum")
            terms["kl"] = algo.kl_coef * kl
            stats["kl"] = kl.item()
        return terms, stats

    def critic_terms(self, values: torch.Tensor, out: PolicyOutput, rows: Sequence[Row],
                     tokens: int, share: float) -> tuple[torch.Tensor, dict[str, float]]:
        """The clipped value loss over the step's ``tokens``; stats: it and its clip fraction."""
        width, device = out.mask.size(1), out.mask.device
        loss, clipfrac = critic_loss(values, pad([r.old_values for r in rows], width).to(device),
                                     pad([r.returns for r in rows], width).to(device), out.mask,
                                     self.settings.value_clip, tokens)
        return loss, {"value_loss": loss.item(), "value_clipfrac": clipfrac * share}

"""The local backend's ``model.parallel: fsdp``: the update on FSDP2-sharded weights.

Under ``ddp`` every rank holds the whole policy, its gradients and its AdamW state. Under
``fsdp`` the *training* copy is sharded with ``torch.distributed.fsdp.fully_shard`` (one
unit per decoder layer, then the root): each rank keeps 1/N of the weights, gradients and
optimizer state, and the forward and backward all-gather and reduce-scatter layer by layer.

Those are collectives, so every rank must run the same number of forwards and backwards,
while MIRAGE's ranks run different amounts of work: sampling and scoring lengths differ
per rank, and a rank's share of the rows may be empty (``World.share``; ``map_shares``
does not even call the backend there). Hence:

- Sampling, scoring, cross-scoring, the reference policy and the gradient decomposition
  run on ``backend.model``, a plain full-weight replica, with no collectives; it is
  refreshed from the shards after every optimizer step, which every rank takes.
- :func:`train_step` pads this rank's share of the micro-batches to the most any rank has
  (known to every rank from the share sizes, without asking) with zero-loss micro-batches,
  so the collectives pair up.
- Gradients are summed over the ranks, not averaged (FSDP2's default): MIRAGE's losses
  are token sums with per-row weights, as under ``ddp`` (``World.sum_gradients``).

The replica costs one full copy of the weights per rank; what ``fsdp`` saves over ``ddp``
is the gradients and the optimizer state (two more copies under AdamW) and, during the
update, the weights of all but the layer being computed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

from mirage.core.parallel.world import World
from mirage.core.rl.training import LossRecipe, Row, add_stats, micro_batch_losses, my_micro_batches

FULL = StateDictOptions(full_state_dict=True)  # every rank gets every tensor
FULL_ON_MAIN = StateDictOptions(full_state_dict=True, cpu_offload=True)  # rank 0 only, on the CPU


def shard(model: torch.nn.Module, world: World, device: torch.device) -> torch.nn.Module:
    """``model`` sharded in place over ``world``: one FSDP unit per module of a class that
    transformers says must not be split (``_no_split_modules``: the decoder layers), then
    the root; gradients summed, not averaged, over the ranks."""
    mesh = init_device_mesh(device.type, (world.size,))
    units = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules()):
        if type(module).__name__ in units:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):  # neither setting reaches the units below
            module.set_gradient_divide_factor(1.0)
            # gloo has no PREMUL_SUM (what a factor of 1 asks for in float32): a plain SUM
            module.set_force_sum_reduction_for_comms(True)
    return model


class ShardedPolicy:
    """The FSDP2-sharded training copy of a policy and the AdamW over its shards' trained
    parameters.

    With LoRA (``model.lora``) the copy holds the frozen base and the adapters; only the
    policy's adapter trains (FSDP2 shards frozen and trained parameters alike, and gathers
    and scatters gradients only for the trained ones), so only its parameters have
    gradients and AdamW state, and only they are gathered back into the replica after a
    step. The critic's adapter, copied with the rest, stays frozen there: the critic runs
    on the replica."""

    def __init__(self, replica: torch.nn.Module, trained: Sequence[torch.nn.Parameter], world: World,
                 device: torch.device, lr: float, optimizer: torch.optim.Optimizer):
        """``trained``: the replica's trained parameters (every weight, or the policy's
        adapter); ``optimizer``: the replica's plain AdamW over them, whose state (a resumed
        run's, or none) the shards' optimizer takes over."""
        names = {id(p): name for name, p in replica.named_parameters()}
        self.trained = [names[id(p)] for p in trained]  # in the replica's optimizer's order
        module = copy.deepcopy(replica)
        chosen = set(self.trained)
        for name, parameter in module.named_parameters():
            parameter.requires_grad_(name in chosen)
        self.module = shard(module, world, device)
        sharded = dict(self.module.named_parameters())
        self.optimizer = torch.optim.AdamW([sharded[name] for name in self.trained], lr=lr, weight_decay=0.0)
        if optimizer.state:  # every rank loaded the same checkpoint
            named = get_optimizer_state_dict(replica, optimizer, options=FULL)
            set_optimizer_state_dict(self.module, self.optimizer, named, options=FULL)

    def step(self, max_grad_norm: float, replica: torch.nn.Module) -> float:
        """Clip, step and zero the shards' optimizer, then copy the new trained weights into
        ``replica``; the pre-clip gradient norm. A collective: every rank calls it."""
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        sharded, plain = dict(self.module.named_parameters()), dict(replica.named_parameters())
        with torch.no_grad():
            for name in self.trained:  # every rank in the same order: each gather pairs up
                source = sharded[name]
                plain[name].copy_(source.full_tensor() if isinstance(source, DTensor) else source)
        return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)

    def plain_optimizer_state(self, replica: torch.nn.Module, trained: Sequence[torch.nn.Parameter], lr: float,
                              main: bool) -> dict[str, Any] | None:
        """The optimizer's state gathered to the main rank as the state dict of a plain
        AdamW over ``trained`` (the replica's trained parameters: what a checkpoint holds,
        whatever ``model.parallel``, so it resumes on any number of processes); None on the
        other ranks. A collective: every rank calls it."""
        named = get_optimizer_state_dict(self.module, self.optimizer, options=FULL_ON_MAIN)
        if not main:
            return None
        plain = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
        set_optimizer_state_dict(replica, plain, named, options=FULL)
        return plain.state_dict()


def micro_batch_count(world: World, rows: int, size: int) -> int:
    """The most micro-batches any rank has of the ``ceil(rows / size)`` one process makes."""
    return max(len(world.share(math.ceil(rows / size), rank)) for rank in range(world.size))


def train_step(backend: Any, policy: ShardedPolicy, rows: Sequence[Row],
               recipe: LossRecipe) -> dict[str, float]:
    """:func:`mirage.core.rl.training.train_step` on the sharded policy: this rank's share
    of the micro-batches, padded with zero-loss micro-batches to the count of the busiest
    rank; FSDP sums the policy's gradients in each backward; a critic (not sharded) has its
    gradients summed as under ``ddp``; the stats are summed over the ranks; then the step,
    and the replica takes the new weights. ``backend`` is the LocalBackend (not imported:
    it imports this module)."""
    world = backend.world
    critic = bool(rows) and rows[0].returns is not None
    tokens = sum(len(r.turn.response_ids) for r in rows)
    mine = my_micro_batches(world, rows, recipe.micro_batch_size)
    if recipe.needs_reference and not backend.has_reference():
        backend.freeze_reference()
    totals: dict[str, float] = {}
    policy.module.train()
    for index in range(micro_batch_count(world, len(rows), recipe.micro_batch_size)):
        if index < len(mine):
            micro = mine[index]
            out = backend.per_token(policy.module, [r.turn.prompt for r in micro],
                                    [r.turn.response_ids for r in micro])
            losses, stats = micro_batch_losses(backend, recipe, micro, out, len(rows), tokens, critic)
            add_stats(totals, stats)
        else:  # the same all-gathers and reduce-scatters as a real one, adding zeros
            first = rows[0].turn
            losses = [0.0 * backend.per_token(policy.module, [first.prompt], [first.response_ids]).logprobs.sum()]
        for loss in losses:
            loss.backward()
    if critic:
        world.sum_gradients(backend.critic_parameters())
    totals = world.sum_floats(totals)
    totals["update/grad_norm"] = policy.step(recipe.max_grad_norm, backend.model)
    if critic:
        totals["update/critic_grad_norm"] = backend.critic_step(recipe.max_grad_norm)
    return totals

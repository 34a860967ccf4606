"""The training seam between an algorithm and a backend.

An algorithm decides *what* to learn: it turns a batch into training rows (each turn's
response tokens with their advantages, per-token loss weights and, for a critic, returns
and old values) and hands over a :class:`LossRecipe`, a small picklable object that turns
the policy's per-token outputs for some rows into loss terms. A backend decides *how*:
:meth:`Backend.train_step` runs one optimizer step over a mini-batch of rows (micro-batches,
forward, backward, clipping, step), wherever its trainer lives, and
:meth:`Backend.loss_gradients` returns each loss term's gradient without stepping (the
gradient decomposition). The recipe is the only code of the algorithm that runs inside the
trainer, so a backend on other processes or machines can ship it there.

:func:`train_step` and :func:`loss_gradients` are the in-process implementations over the
torch primitives a single-process backend provides (``forward``, ``values``,
``reference_logprobs``, ``optimizer_step``, ``critic_step``, ``gradient``);
:class:`~mirage.core.rl.backend.Backend` uses them by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Protocol, Sequence

import torch

from mirage.core.parallel.world import SINGLE, World
from mirage.core.rl.batch import Turn

if TYPE_CHECKING:
    from mirage.core.rl.policy_output import PolicyOutput


@dataclass
class Row:
    """One turn to train on. Tensors are ``[L]``, one entry per response token."""

    turn: Turn
    advantages: torch.Tensor
    returns: torch.Tensor | None = None  # critic targets (gae estimator only)
    old_values: torch.Tensor | None = None  # critic values before this update
    weight: float = 0.0  # per-token loss weight, set per mini-batch (token_weights)


class LossRecipe(Protocol):
    """How an algorithm's loss is computed from the policy's outputs on some rows.

    ``terms`` are scalars with gradient whose sum is the loss backpropagated, each with
    its coefficient applied (the gradient decomposition reports them one by one); ``stats``
    are floats the backend adds up over the micro-batches of a step (already multiplied by
    ``share``, the micro-batch's share of the step's rows, where a mean is wanted).
    """

    micro_batch_size: int  # rows per forward/backward
    max_grad_norm: float  # clipping of the policy's and the critic's gradients
    needs_reference: bool  # the terms read the frozen reference policy's log-probs

    def policy_terms(self, out: "PolicyOutput", rows: Sequence[Row], reference: torch.Tensor | None,
                     share: float) -> tuple[dict[str, torch.Tensor], dict[str, float]]: ...

    def critic_terms(self, values: torch.Tensor, out: "PolicyOutput", rows: Sequence[Row],
                     tokens: int, share: float) -> tuple[torch.Tensor, dict[str, float]]: ...


class InProcessPolicy(Protocol):
    """The torch primitives :func:`train_step` and :func:`loss_gradients` drive (a
    single-process :class:`~mirage.core.rl.backend.Backend` provides them; see its docs)."""

    def forward(self, contexts: list[list[int]], responses: list[list[int]]) -> PolicyOutput: ...
    def values(self, contexts: list[list[int]], responses: list[list[int]]) -> torch.Tensor: ...
    def reference_logprobs(self, contexts: list[list[int]], responses: list[list[int]]) -> torch.Tensor: ...
    def freeze_reference(self) -> None: ...
    def has_reference(self) -> bool: ...
    def optimizer_step(self, max_grad_norm: float) -> float: ...
    def critic_step(self, max_grad_norm: float) -> float: ...
    def gradient(self, loss: torch.Tensor, *, retain_graph: bool = False) -> torch.Tensor: ...
    # a data-parallel run (``world`` of more than one process) also sums these gradients
    world: World
    def policy_parameters(self) -> Iterable[torch.nn.Parameter]: ...
    def critic_parameters(self) -> Iterable[torch.nn.Parameter]: ...


def micro_batches(rows: Sequence[Row], size: int) -> list[Sequence[Row]]:
    return [rows[start : start + size] for start in range(0, len(rows), size)]


def _ids(rows: Sequence[Row]) -> tuple[list[list[int]], list[list[int]]]:
    return [r.turn.prompt for r in rows], [r.turn.response_ids for r in rows]


def _reference(backend: InProcessPolicy, recipe: LossRecipe, rows: Sequence[Row]) -> torch.Tensor | None:
    """The reference policy's log-probs of ``rows`` when the recipe reads them; the
    reference is the policy as it was when first needed (frozen then)."""
    if not recipe.needs_reference:
        return None
    if not backend.has_reference():
        backend.freeze_reference()
    return backend.reference_logprobs(*_ids(rows))


def train_step(backend: InProcessPolicy, rows: Sequence[Row], recipe: LossRecipe) -> dict[str, float]:
    """One optimizer step over ``rows`` in this process: per micro-batch, forward, the
    recipe's loss, backward (the critic's too when rows carry returns); then clip and step.
    Returns the recipe's stats summed over micro-batches, ``grad_norm`` (pre-clip) and,
    with a critic, ``critic_grad_norm``, all under ``update/``.

    In a data-parallel run (``backend.world``) every rank is given the same ``rows``, cuts
    them into the micro-batches one process would, works on its share of those, and the
    gradients and stats are summed over the ranks before the step: the sums are the whole
    mini-batch's, micro-batch by micro-batch as one process adds them, and every rank
    takes the same step (docs/scaling.md)."""
    world = _world(backend)
    critic = bool(rows) and rows[0].returns is not None
    tokens = sum(len(r.turn.response_ids) for r in rows)
    totals: dict[str, float] = {}
    if recipe.needs_reference and not backend.has_reference():
        backend.freeze_reference()
    for micro in my_micro_batches(world, rows, recipe.micro_batch_size):
        losses, stats = micro_batch_losses(backend, recipe, micro, backend.forward(*_ids(micro)),
                                           len(rows), tokens, critic)
        for loss in losses:
            loss.backward()
        add_stats(totals, stats)
    if world.distributed:
        world.sum_gradients(backend.policy_parameters())
        if critic:
            world.sum_gradients(backend.critic_parameters())
        totals = world.sum_floats(totals)
    totals["update/grad_norm"] = backend.optimizer_step(recipe.max_grad_norm)
    if critic:
        totals["update/critic_grad_norm"] = backend.critic_step(recipe.max_grad_norm)
    return totals


def micro_batch_losses(backend: InProcessPolicy, recipe: LossRecipe, micro: Sequence[Row], out: "PolicyOutput",
                       rows: int, tokens: int, critic: bool) -> tuple[list[torch.Tensor], dict[str, float]]:
    """The losses to backpropagate for micro-batch ``micro`` of a step over ``rows`` rows
    and ``tokens`` response tokens, given the policy's outputs ``out`` on it: the recipe's
    terms summed, then (``critic``) the value loss; and their stats."""
    share = len(micro) / rows
    terms, stats = recipe.policy_terms(out, micro, _reference(backend, recipe, micro), share)
    loss = None
    for term in terms.values():
        loss = term if loss is None else loss + term
    losses = [loss]
    if critic:
        value_loss, critic_stats = recipe.critic_terms(backend.values(*_ids(micro)), out, micro, tokens, share)
        losses.append(value_loss)
        stats = stats | critic_stats
    return losses, stats


def add_stats(totals: dict[str, float], stats: dict[str, float]) -> None:
    """Add a micro-batch's ``stats`` to the step's ``totals``, under ``update/``."""
    for name, value in stats.items():
        totals[f"update/{name}"] = totals.get(f"update/{name}", 0.0) + value


def _world(backend: InProcessPolicy) -> World:
    return getattr(backend, "world", SINGLE)


def my_micro_batches(world: World, rows: Sequence[Row], size: int) -> list[Sequence[Row]]:
    """This rank's share of the micro-batches one process cuts ``rows`` into (all of them
    in a one-process run): whole micro-batches, so every per-micro-batch statistic (a clip
    fraction, say) is the one-process run's whatever the number of ranks."""
    every = micro_batches(rows, size)
    share = world.share(len(every))
    return every[share.start : share.stop]


def loss_gradients(backend: InProcessPolicy, rows: Sequence[Row], recipe: LossRecipe) -> dict[str, torch.Tensor]:
    """Each loss term's gradient over ``rows`` (one mini-batch, weights set), flattened
    over every policy parameter and summed over micro-batches (and, in a data-parallel
    run, over the ranks, each working on its share); nothing accumulates into ``.grad``
    and no optimizer steps (``Backend.gradient``)."""
    world = _world(backend)
    sums: dict[str, torch.Tensor] = {}
    with torch.enable_grad():
        for micro in my_micro_batches(world, rows, recipe.micro_batch_size):
            out = backend.forward(*_ids(micro))
            terms, _ = recipe.policy_terms(out, micro, _reference(backend, recipe, micro), 1.0)
            live = [name for name, loss in terms.items() if loss.requires_grad]
            for position, name in enumerate(live):
                gradient = backend.gradient(terms[name], retain_graph=position < len(live) - 1)
                sums[name] = gradient if name not in sums else sums[name] + gradient
    if world.distributed:
        sums = _summed_over_ranks(world, sums)
    return sums


def _summed_over_ranks(world: World, sums: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each term's gradient summed over the ranks; a rank whose share had no such term
    (or no rows) adds zeros."""
    shapes: dict[str, tuple[int, torch.dtype, str]] = {}
    for part in world.gather([{name: (v.numel(), v.dtype, str(v.device)) for name, v in sums.items()}]):
        shapes.update(part)
    summed = {}
    for name in sorted(shapes):
        size, dtype, device = shapes[name]
        vector = sums[name] if name in sums else torch.zeros(size, dtype=dtype, device=device)
        summed[name] = world.sum_tensor_(vector)
    return summed

"""The processes of one data-parallel run and what they exchange (``model.parallel: ddp``).

Every rank runs the same loop on the same batch (docs/scaling.md): the work that grows with
the batch (sampling, scoring, cross-scoring, the update's forward and backward) is split
into contiguous shares by :meth:`World.share`, each rank does its share, and the results
are put back together in rank order (:meth:`World.gather`), or, for gradients, summed
(:meth:`World.sum_gradients`). A one-process run is :data:`SINGLE`, whose operations
return their input, so the loop has one code path for every world size.

The collectives are torch.distributed's on its default process group (gloo on the CPU,
NCCL on GPUs), set up by the launcher (torchrun or Ray Train; mirage/core/run/launch.py).
Their wall time is counted in :attr:`World.communication` for the step's
``time/communication`` metric.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

BUCKET_BYTES = 64 * 2**20  # gradients summed per all-reduce (DDP's default bucket is 25 MiB)

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class World:
    """This process's place in the run: ``rank`` of ``size`` processes, ``local_rank`` on
    its machine. Rank 0 is the main rank: it owns the store, loggers, checkpoints and the
    progress bar."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    communication: float = field(default=0.0, compare=False)
    """Seconds spent in collectives since the last :meth:`drain_communication`."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    # ------------------------------------------------------------------ work split
    def share(self, count: int, rank: int | None = None) -> range:
        """The contiguous indices of ``count`` items that ``rank`` (default: this one) works
        on: the first ``count % size`` ranks take one more than the others."""
        rank = self.rank if rank is None else rank
        base, extra = divmod(count, self.size)
        start = rank * base + min(rank, extra)
        return range(start, start + base + (rank < extra))

    def map_shares(self, work: Callable[[list[T]], list[R]], items: Sequence[T]) -> list[R]:
        """``work`` over this rank's share of ``items`` (one result per item), gathered in
        item order on every rank. A rank with an empty share does not call ``work``."""
        mine = [items[i] for i in self.share(len(items))]
        local = work(mine) if mine else []
        if len(local) != len(mine):
            raise RuntimeError(f"{len(local)} results for {len(mine)} items")
        return self.gather(local)

    # ------------------------------------------------------------------ collectives
    def gather(self, local: list[T]) -> list[T]:
        """Every rank's ``local`` list, concatenated in rank order, on every rank."""
        import torch

        if not self.distributed:
            return list(local)
        parts: list[Any] = [None] * self.size
        with self._timed():
            torch.distributed.all_gather_object(parts, list(local))
        return [item for part in parts for item in part]

    def broadcast(self, value: T) -> T:
        """The main rank's ``value`` on every rank (the others pass anything, e.g. None)."""
        import torch

        if not self.distributed:
            return value
        box = [value if self.is_main else None]
        with self._timed():
            torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def sum_floats(self, values: dict[str, float]) -> dict[str, float]:
        """Each name's value summed over the ranks (a name missing on a rank counts 0)."""
        import torch

        if not self.distributed:
            return dict(values)
        names = sorted({name for part in self.gather([values]) for name in part})
        if not names:
            return {}
        total = torch.tensor([float(values.get(name, 0.0)) for name in names], dtype=torch.float64)
        with self._timed():
            torch.distributed.all_reduce(total)
        return dict(zip(names, total.tolist()))

    def sum_tensor_(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` replaced by its sum over the ranks, in place; returned."""
        import torch

        if self.distributed:
            with self._timed():
                torch.distributed.all_reduce(tensor)
        return tensor

    def sum_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        """Each parameter's ``.grad`` replaced by its sum over the ranks (a parameter
        without one counts zeros): what the single-process gradient of the whole batch
        is, since MIRAGE's losses are token sums with per-row weights. The gradients go
        in flat buckets of up to :data:`BUCKET_BYTES` (one all-reduce each, as DDP's
        reducer does), so the reduction needs that much memory beside them, not a copy
        of every gradient."""
        import torch

        if not self.distributed:
            return
        bucket: list[torch.nn.Parameter] = []
        size = 0
        for p in parameters:
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if bucket and (p.grad.dtype, p.grad.device) != (bucket[0].grad.dtype, bucket[0].grad.device):
                self._sum_bucket(bucket)
                bucket, size = [], 0
            bucket.append(p)
            size += p.grad.numel() * p.grad.element_size()
            if size >= BUCKET_BYTES:
                self._sum_bucket(bucket)
                bucket, size = [], 0
        if bucket:
            self._sum_bucket(bucket)

    def _sum_bucket(self, bucket: list[torch.nn.Parameter]) -> None:
        import torch

        flat = torch.cat([p.grad.reshape(-1) for p in bucket])
        self.sum_tensor_(flat)
        offset = 0
        for p in bucket:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
            offset += p.numel()

    def broadcast_parameters(self, parameters: Iterable[torch.Tensor]) -> None:
        """The main rank's values of ``parameters`` on every rank (in place)."""
        import torch

        if not self.distributed:
            return
        with self._timed(), torch.no_grad():
            for tensor in parameters:
                torch.distributed.broadcast(tensor.data, src=0)

    def gather_ranks(self) -> list[dict[str, Any]]:
        """Each rank's process: ``rank``, ``local_rank``, ``pid`` and ``host``."""
        import socket

        return self.gather([{"rank": self.rank, "local_rank": self.local_rank, "pid": os.getpid(),
                             "host": socket.gethostname()}])

    def barrier(self) -> None:
        import torch

        if self.distributed:
            with self._timed():
                torch.distributed.barrier()

    def drain_communication(self) -> float:
        """Seconds spent in collectives since the last call."""
        spent, self.communication = self.communication, 0.0
        return spent

    @contextmanager
    def _timed(self) -> Iterator[None]:
        mark = time.perf_counter()
        try:
            yield
        finally:
            self.communication += time.perf_counter() - mark


SINGLE = World()
"""The world of a one-process run."""


def current_world() -> World:
    """The world torch.distributed's default group describes (:data:`SINGLE` when it is
    not initialised); ``local_rank`` from the launcher's ``LOCAL_RANK``."""
    import torch

    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return World()
    return World(rank=torch.distributed.get_rank(), size=torch.distributed.get_world_size(),
                 local_rank=int(os.environ.get("LOCAL_RANK", "0")))

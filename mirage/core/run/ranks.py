"""What the ranks of a data-parallel run do differently at its start (the steps
themselves are the same on every rank: mirage/core/run/loop.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mirage.core.plugin_api.session import RunSession


def prepare_policy(run: RunSession, cache_dir: Path, *, progress: bool) -> dict[str, Any]:
    """``backend.prepare`` on every rank, the main rank first: it builds (or finds) the
    warm start in the shared cache, which the others then load rather than build at the
    same time; its progress bar is the only one. Then every rank holds the main rank's
    weights (broadcast), so all start from one policy."""
    world = run.world
    if not world.is_main:
        world.barrier()
    facts = run.backend.prepare(run.env_cls, cache_dir, progress=progress and world.is_main)
    if world.is_main:
        world.barrier()
    if world.distributed:
        world.broadcast_parameters(run.backend.policy_parameters())
    return facts

"""The task runner cells run on: a local process pool, threads, or a Ray cluster."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Literal

from mirage.core.parallel.local_ray import LOCAL_RAY

Runner = Literal["process", "thread", "ray"]
RUNNERS = ("process", "thread", "ray")


def make_task_runner(runner: str, width: int, ray_address: str | None = None):
    """``process``: up to ``width`` cells at once in worker processes (CPU-bound work);
    ``thread``: the same in threads of the flow process; ``ray``: prefect-ray's runner on
    the cluster at ``ray_address``, or, for ``local``, on a local Ray with ``width`` CPUs and
    no dashboard (its servers listen on every interface: the commands refuse ``ray`` with
    no address, mirage/core/parallel/local_ray.py)."""
    if width < 1:
        raise ValueError(f"width must be >= 1 (got {width})")
    if runner == "process":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner(max_workers=width)
    if runner == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=width)
    if runner == "ray":
        from prefect_ray import RayTaskRunner

        from mirage.core.errors import ConfigError
        from mirage.core.parallel.local_ray import local_ray_refusal

        if not ray_address:  # a served deployment's parameters come this way too
            raise ConfigError(local_ray_refusal("--runner ray"))

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # silences a token warning locally
        if ray_address and ray_address != LOCAL_RAY:
            return RayTaskRunner(address=ray_address)
        return RayTaskRunner(init_kwargs={"num_cpus": width, "include_dashboard": False})
    raise ValueError(f"unknown runner {runner!r}; valid: {', '.join(RUNNERS)}")


# Each process-pool cell holds its own model, torch threads and Prefect client; more at
# once than this only thrashes one machine (a Ray cluster spreads cells but still
# pulls every result through this process).
MAX_WIDTH = 64


def check_width(width: int) -> None:
    """ConfigError unless 1 <= ``width`` <= MAX_WIDTH (checked before Prefect starts)."""
    from mirage.core.errors import ConfigError

    if not 1 <= width <= MAX_WIDTH:
        raise ConfigError(f"--width {width}: cells at once must be in 1..{MAX_WIDTH}")


@contextlib.contextmanager
def shared_api_server() -> Iterator[None]:
    """While entered, the flow's task runs carry the address of the flow's own Prefect API
    server, so the pool's worker processes report to it instead of each starting one.

    Without ``PREFECT_API_URL`` Prefect runs a flow against a temporary server it starts in
    a subprocess, and a process-pool worker, which inherits the flow's settings rather than
    its server, started a temporary server of its own before its first cell: three servers
    for a sweep of width 2, each a few seconds of start-up and a couple of hundred MB.
    Nothing changes when ``PREFECT_API_URL`` names a server (every process already uses
    it) or when no temporary server runs here."""
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    if get_current_settings().api.url:
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # Prefect's one temporary server of this process
    if not server.running:
        yield
        return
    with temporary_settings({PREFECT_API_URL: server.api_url}):
        yield

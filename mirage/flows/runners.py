"""The task runner cells run on: a local process pool, threads, or a Ray cluster."""

from __future__ import annotations

import os
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

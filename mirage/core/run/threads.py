"""How many torch threads a run computes with.

``threads: auto`` (the default) picks the count from the machine when the run starts:
``MIRAGE_THREADS`` when set; otherwise the cores this process may use (CPU affinity), capped
by the cgroup CPU quota (containers), by the physical cores (hyper-threads share one
core's arithmetic units), and by the cores idle at that moment (the idle share of CPU
time over 0.3 s; the load average where that is not readable). A whole
number in the config is used as it is (sweeps pin one thread per cell). The choice and
its reason are recorded with the run's backend facts.

Why the load matters: on a busy 2-core machine two torch threads ran an iteration 3.6x
slower than one (each thread waits for the slowest at every operation); bench/threads.py
measures 1 against N threads side by side.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from mirage.core.errors import ConfigError

ENV = "MIRAGE_THREADS"


@dataclass(frozen=True)
class ThreadChoice:
    count: int
    reason: str


def usable_cpus() -> int:
    """Logical CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cgroup_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs the cgroup CPU quota allows (cgroup v2 ``cpu.max``, else v1 CFS), or None
    when there is no quota."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def physical_cores(cpus: set[int] | None = None, root: Path = Path("/sys/devices/system/cpu")) -> int | None:
    """Distinct physical cores among ``cpus`` (default: this process's), or None when the
    topology is not readable."""
    if cpus is None:
        try:
            cpus = os.sched_getaffinity(0)
        except AttributeError:
            return None
    cores = set()
    for cpu in cpus:
        topology = root / f"cpu{cpu}" / "topology"
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(),
                       (topology / "core_id").read_text().strip()))
        except OSError:
            return None
    return len(cores) or None


def idle_share(window: float = 0.3, stat: Path = Path("/proc/stat")) -> float | None:
    """The share of the machine's CPU time that was idle over the next ``window`` seconds
    (``/proc/stat``), or None where it is not readable."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in stat.read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields[:8]), fields[3] + fields[4]  # all but guest time; idle + iowait

    try:
        total, idle = sample()
        time.sleep(window)
        total2, idle2 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return (idle2 - idle) / (total2 - total) if total2 > total else None


def idle_cores(cpus: int, share: float | None = None) -> int:
    """Of ``cpus``, how many are idle now (at least 1): from the idle share of CPU time
    measured over a moment, else from the last minute's load average (which lags: it still
    counts work that just ended and not yet work that just began)."""
    if share is not None:
        return max(1, min(cpus, math.floor(cpus * share + 0.5)))
    try:
        load = os.getloadavg()[0]
    except OSError:
        return cpus
    return max(1, min(cpus, math.floor(cpus - load + 0.5)))


def choose(requested: int | str, environ: os._Environ | dict = os.environ) -> ThreadChoice:
    """The thread count for a run configured with ``threads: requested``."""
    if requested != "auto":
        return ThreadChoice(int(requested), "configured")
    if environ.get(ENV):
        value = environ[ENV]
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{ENV}={value!r}: expected a whole number of threads >= 1")
        return ThreadChoice(int(value), f"{ENV}={value}")
    cpus = usable_cpus()
    limits = {"usable CPUs": cpus}
    quota = cgroup_quota()
    if quota is not None:
        limits["cgroup quota"] = max(1, math.floor(quota))
    physical = physical_cores()
    if physical is not None:
        limits["physical cores"] = physical
    limits["idle cores"] = idle_cores(cpus, idle_share())
    binding = min(limits, key=limits.get)
    return ThreadChoice(limits[binding], f"auto: {binding} ({', '.join(f'{k} {v}' for k, v in limits.items())})")


def apply(requested: int | str) -> ThreadChoice:
    """Choose, and set torch's intra-op thread count to the choice."""
    choice = choose(requested)
    torch.set_num_threads(choice.count)
    return choice


def apply_checked(requested: int | str) -> ThreadChoice:
    """``apply``, with a bad ``MIRAGE_THREADS`` refused as a configuration error (the CLI's
    one-line message and exit status 2) before a run writes anything."""
    try:
        return apply(requested)
    except ValueError as error:
        raise ConfigError(str(error)) from None

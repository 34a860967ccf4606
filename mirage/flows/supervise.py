"""A sweep owns its processes: ``core sweep`` runs the flow in a child process group and
ends that whole group however it itself ends.

The flow starts many processes: a temporary Prefect API server (without
``PREFECT_API_URL``; the pool's workers report to it, mirage/flows/runners.py), the pool's
workers and multiprocessing's resource tracker. They all stay in the child's process group (none starts a session of its own),
so one ``killpg`` ends them. Three ways the supervisor can end:

- it returns (the flow finished or failed): the group is killed to take any straggler;
- SIGINT, SIGTERM or SIGHUP: the same signal goes to the group, then SIGKILL after a grace;
- SIGKILL (nothing runs in the supervisor): a watchdog thread in the child sees its
  parent change and SIGKILLs its own group.

Cells write their results atomically (``outcome.json`` by rename, the main store in
transactions), so a killed sweep leaves no half-written cell: a re-run reruns what
lacks an outcome and loads what has one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

# Set in the child's environment to the supervisor's pid: "you are supervised by it".
SUPERVISED = "MIRAGE_SWEEP_SUPERVISED"
GRACE_SECONDS = 10.0
WATCH_SECONDS = 0.5


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the group; False if it is already gone."""
    try:
        os.killpg(pgid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _group_alive(pgid: int) -> bool:
    return _signal_group(pgid, 0)


def _end_group(pgid: int, signum: int, grace: float) -> None:
    """``signum`` to the group, then SIGKILL to whatever is left after ``grace`` seconds."""
    if not _signal_group(pgid, signum):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)


def supervise(argv: list[str], grace: float = GRACE_SECONDS) -> int:
    """Run ``python -m mirage *argv`` (the ``core`` program) in a new process group and
    return its exit code; the group never outlives this call (nor this process)."""
    env = dict(os.environ, **{SUPERVISED: str(os.getpid())})
    child = subprocess.Popen([sys.executable, "-m", "mirage", *argv], env=env,
                             start_new_session=True)
    received: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        received.append(signum)
        _end_group(child.pid, signum, grace)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _signal_group(child.pid, signal.SIGKILL)  # stragglers of a flow that ended
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            pass
    return 128 + received[0] if received else code


def watch_parent(supervisor_pid: int, period: float = WATCH_SECONDS) -> None:
    """In the supervised child: SIGKILL this process group as soon as the supervisor is
    gone (its pid is no longer our parent: it died, even by SIGKILL)."""

    if os.getpgrp() != os.getpid():  # not a group leader: the group is not ours to end
        return

    def watch() -> None:
        while os.getppid() == supervisor_pid:
            time.sleep(period)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="sweep-supervisor-watch", daemon=True).start()

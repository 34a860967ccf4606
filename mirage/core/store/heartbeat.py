"""Is a ``running`` run still running? Its process says so by a heartbeat in the store.

A run records its pid, host and process start time when it starts (or resumes), and a
thread refreshes ``heartbeat_at`` every ``HEARTBEAT_SECONDS``: step ends alone are not
enough, since one step (or a warm start) can take many minutes. A run stored as
``running`` is shown as ``crashed`` when, on this host, its process is gone (or its pid
now belongs to a process that started at another time), or, from any host, its last
heartbeat is older than ``STALE_SECONDS``. Runs written before heartbeats existed are
judged by their last write (``updated_at``).
"""

from __future__ import annotations

import os
import socket
import threading
from datetime import datetime, timezone
from typing import Any, Mapping

import psutil

from mirage.core.store.run_store import RunStore

HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 180.0  # six missed heartbeats: a busy store (a writer waits up to 60 s) is not a crash
CRASHED = "crashed"


def this_process() -> dict[str, Any]:
    """The liveness columns that identify the current process."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "process_started": psutil.Process().create_time()}


def process_alive(pid: int, started: float | None) -> bool:
    """Whether ``pid`` on this host is the process that started at ``started``."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(process.create_time() - started) < 1.0
    except psutil.Error:
        return False


def effective_status(run: Mapping[str, Any], now: datetime | None = None) -> str:
    """The run's stored status, except ``crashed`` for a ``running`` run whose process is
    gone (see the module docstring). ``run`` is a row as ``RunStore.get_run`` returns it."""
    if run["status"] != "running":
        return run["status"]
    if run.get("pid") and run.get("host") == socket.gethostname():
        if not process_alive(run["pid"], run.get("process_started")):
            return CRASHED
    last = run.get("heartbeat_at") or run["updated_at"]
    now = now or datetime.now(timezone.utc)
    return CRASHED if (now - last).total_seconds() > STALE_SECONDS else "running"


def liveness(run: Mapping[str, Any]) -> str:
    """Where a run's process is, e.g. ``pid 4242 on gpu-3, heartbeat 2026-01-02 10:11:12 UTC``."""
    if not run.get("pid"):
        return "no process recorded"
    beat = run.get("heartbeat_at")
    return (f"pid {run['pid']} on {run.get('host')}, heartbeat "
            + (f"{beat:%Y-%m-%d %H:%M:%S} UTC" if beat else "never"))


class Heartbeat:
    """``with Heartbeat(store, run_id):`` records this process on the run and refreshes
    its heartbeat from a daemon thread until the block ends. A failed refresh (the store
    busy for long) is skipped: the next one tries again."""

    def __init__(self, store: RunStore, run_id: str, interval: float = HEARTBEAT_SECONDS) -> None:
        self.store, self.run_id, self.interval = store, run_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{run_id}", daemon=True)

    def __enter__(self) -> "Heartbeat":
        self.store.update_run(self.run_id, **this_process(),
                              heartbeat_at=datetime.now(timezone.utc))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.store.heartbeat(self.run_id)
            except Exception:  # noqa: BLE001 - a missed beat only ages the heartbeat
                continue

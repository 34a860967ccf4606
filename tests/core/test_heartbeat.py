"""Honest status: a ``running`` run whose process is gone reads as ``crashed``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import psutil

from mirage.core.store.heartbeat import STALE_SECONDS, Heartbeat, effective_status, this_process

NOW = datetime(2026, 1, 2, 12, 0, tzinfo=timezone.utc)


def row(**fields):
    base = {"status": "running", "pid": None, "host": None, "process_started": None,
            "heartbeat_at": NOW, "updated_at": NOW}
    return base | fields


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_stored_terminal_statuses_are_shown_as_stored():
    for status in ("finished", "failed", "stopped"):
        assert effective_status(row(status=status, heartbeat_at=NOW - timedelta(days=9)), NOW) == status


def test_a_live_process_on_this_host_is_running():
    assert effective_status(row(**this_process()), NOW) == "running"


def test_a_gone_process_on_this_host_is_crashed_whatever_its_heartbeat():
    here = socket.gethostname()
    assert effective_status(row(pid=dead_pid(), host=here), NOW) == "crashed"


def test_a_reused_pid_is_crashed():
    mine = this_process()
    assert effective_status(row(**(mine | {"process_started": mine["process_started"] - 3600})), NOW) == "crashed"


def test_another_host_is_judged_by_its_heartbeat_age():
    elsewhere = {"pid": 1, "host": "some-other-host", "process_started": 0.0}
    fresh = NOW - timedelta(seconds=STALE_SECONDS - 1)
    stale = NOW - timedelta(seconds=STALE_SECONDS + 1)
    assert effective_status(row(**elsewhere, heartbeat_at=fresh), NOW) == "running"
    assert effective_status(row(**elsewhere, heartbeat_at=stale), NOW) == "crashed"


def test_a_run_from_before_heartbeats_is_judged_by_its_last_write():
    old = NOW - timedelta(seconds=STALE_SECONDS + 1)
    assert effective_status(row(heartbeat_at=None, updated_at=NOW), NOW) == "running"
    assert effective_status(row(heartbeat_at=None, updated_at=old), NOW) == "crashed"


def test_the_heartbeat_records_this_process_and_keeps_beating(populated_store):
    from mirage.core.store.run_store import RunStore

    store = RunStore(populated_store)
    with Heartbeat(store, "existing", interval=0.05):
        first = store.get_run("existing")
        assert (first["pid"], first["host"]) == (os.getpid(), socket.gethostname())
        assert abs(first["process_started"] - psutil.Process().create_time()) < 1
        deadline = time.monotonic() + 30
        while store.get_run("existing")["heartbeat_at"] == first["heartbeat_at"]:
            assert time.monotonic() < deadline, "the heartbeat never refreshed"
            time.sleep(0.05)
    assert effective_status(store.get_run("existing")) == "running"

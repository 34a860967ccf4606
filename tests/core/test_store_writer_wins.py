"""issue 22 (3): readers hammering the store (the app's own StoreReader, in other
processes) must not starve the writer: the writer's run finishes with every step."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mirage.core.store.file import writer_marker
from mirage.core.store.run_store import GroupRow, RunStore

REPO = Path(__file__).resolve().parents[2]

READER = """
    import sys, time
    from pathlib import Path
    from mirage.app.reader import StoreReader
    from mirage.core.store.file import StoreBusyError

    path, stop = sys.argv[1], Path(sys.argv[2])
    reader = StoreReader(path)
    done = busy = 0
    deadline = time.monotonic() + 120
    print("ready", flush=True)
    while not stop.exists() and time.monotonic() < deadline:
        try:
            reader.query("SELECT count(*) AS n FROM metrics WHERE run_id = ?", ["r"])
            reader.query("SELECT step, name, value FROM metrics ORDER BY step, name")
            reader.query("SELECT * FROM runs")
            done += 1
        except StoreBusyError:
            busy += 1
    print(done, busy, flush=True)
"""


@pytest.mark.slow  # five processes for several seconds; the store's other tests stay in the fast tier
def test_a_writer_finishes_while_four_readers_hammer_the_store(tmp_path: Path) -> None:
    path, stop = tmp_path / "runs.duckdb", tmp_path / "stop"
    # The old budget (10 s) with which the run died "stayed locked for 10s".
    store = RunStore(path, lock_timeout=10.0, write_lock_timeout=10.0)
    store.create_run("r", {}, [], None)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    readers = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(READER), str(path), str(stop)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for _ in range(4)]
    try:
        for reader in readers:
            assert reader.stdout.readline().strip() == "ready", reader.stderr.read()
        time.sleep(1.0)  # let them hammer before the writer starts
        groups = [GroupRow(i, i, 0.5, 0.25, 0.5, True) for i in range(8)]
        started = time.monotonic()
        for step in range(30):
            store.record_step("r", step, {"loss": float(step), "val/success": 0.5}, groups)
        store.set_status("r", "finished")
        took = time.monotonic() - started
    finally:
        stop.touch()
        outputs = [reader.communicate(timeout=60)[0].split() for reader in readers]
    assert store.get_run("r")["status"] == "finished"
    assert [s for s, n, _ in store.metrics("r", "loss")] == list(range(30))
    assert all(int(done) > 0 for done, _ in outputs), outputs  # the readers did read meanwhile
    assert not writer_marker(path).exists()  # the writer cleaned up its marker
    assert took < 60


def test_a_stale_marker_of_a_killed_writer_does_not_block_readers(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    store = RunStore(path)
    store.create_run("r", {}, [], None)
    marker = writer_marker(path)
    marker.touch()
    old = time.time() - 60
    os.utime(marker, (old, old))
    started = time.monotonic()
    assert store.get_run("r")["run_id"] == "r"
    assert time.monotonic() - started < 1.0

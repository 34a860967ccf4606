"""A running sweep's progress (mirage/flows/progress.py): the main store's sweep rows plus
each started cell's own file, read without writing anything and without waiting on a
cell's writer; `core sweeps` prints it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore
from mirage.flows.cells import CELL_DB, OUTCOME, cell_root
from mirage.flows.progress import read_sweeps
from mirage.flows.sweep_store import SweepStore

# config hash -> (cell, seed)
CELLS = {"h-done": ("filter.rho=0.9", 0), "h-run": ("filter.rho=0.6", 0),
         "h-ended": ("filter.rho=0.4", 0), "h-wait": ("filter.rho=0.2", 0)}


def row(config_hash: str, status: str = "pending", **extra) -> dict:
    cell, seed = CELLS[config_hash]
    return {"sweep_id": "s1", "experiment": "rho", "cell": cell, "seed": seed,
            "config_hash": config_hash, "run_id": None, "status": status, "reused": False,
            "loaded": False, "error": None, **extra}


def running_cell(db, config_hash: str, step: int, steps: int) -> RunStore:
    """A started cell: its own store with a run at ``step`` of ``steps``."""
    cell = RunStore(cell_root(db) / config_hash / CELL_DB)
    cell.create_run("run-" + config_hash, RunConfig(steps=steps).model_dump(mode="json"), [], None)
    for at in range(step + 1):
        cell.record_step("run-" + config_hash, at, {"train/return": 0.1})
    return cell


@pytest.fixture
def live_store(tmp_path):
    """A sweep in progress (recorded by this process): one cell loaded, one running at
    step 3 of 10, one that ended failed but is not loaded yet, one not started."""
    db = tmp_path / "runs" / "main.duckdb"
    sweeps = SweepStore(db)
    sweeps.start_sweep("s1", "rho", [row(h) for h in CELLS], host=socket.gethostname(), pid=os.getpid())
    sweeps.update_sweep_cell("s1", row("h-done", "finished", run_id="run-h-done", success=0.75))
    running_cell(db, "h-run", step=3, steps=10)
    ended = cell_root(db) / "h-ended"
    ended.mkdir(parents=True)
    (ended / OUTCOME).write_text(json.dumps({"status": "failed", "run_id": None,
                                             "error": "OSError: no weights\nmore detail"}))
    return db


def test_a_running_sweep_shows_every_cells_progress(live_store):
    (sweep,) = read_sweeps(live_store)
    assert (sweep.sweep_id, sweep.experiment, sweep.state) == ("s1", "rho", "running")
    cells = {c["config_hash"]: c for c in sweep.cells}
    assert [c["config_hash"] for c in sweep.cells] == list(CELLS)  # the plan's order
    assert (cells["h-done"]["status"], cells["h-done"]["success"]) == ("finished", 0.75)
    assert (cells["h-run"]["status"], cells["h-run"]["step"], cells["h-run"]["steps"]) == ("running", 3, 10)
    assert cells["h-ended"]["status"] == "failed" and cells["h-ended"]["error"].startswith("OSError")
    assert cells["h-wait"]["status"] == "pending" and cells["h-wait"]["step"] is None
    assert sweep.counts() == {"finished": 1, "failed": 1, "stopped": 0, "running": 1, "pending": 1}
    assert sweep.headline() == ("rho (sweep s1): running, 4 cells: 1 finished, 1 failed, 0 stopped, "
                                "1 running, 1 pending")


def test_a_sweep_whose_process_is_gone_reads_interrupted(tmp_path):
    db = tmp_path / "main.duckdb"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    SweepStore(db).start_sweep("s1", "rho", [row("h-run")], host=socket.gethostname(),
                               pid=int(gone.stdout))
    running_cell(db, "h-run", step=2, steps=10)
    (sweep,) = read_sweeps(db)
    assert sweep.state == "interrupted"
    assert sweep.cells[0]["status"] == "pending"  # killed with its sweep: it reruns next time


def test_a_finished_sweep_keeps_its_state_and_message(tmp_path):
    store = SweepStore(tmp_path / "main.duckdb")
    store.start_sweep("s1", "rho", [row("h-done")], host="elsewhere", pid=1)
    store.update_sweep_cell("s1", row("h-done", "failed", error="ValueError: bad"))
    store.finish_sweep("s1", "failed", "rho: 1 cells: 0 run, 0 loaded, 0 reused, 1 failed")
    (sweep,) = read_sweeps(store.path)
    assert (sweep.state, sweep.message) == ("failed", "rho: 1 cells: 0 run, 0 loaded, 0 reused, 1 failed")
    with pytest.raises(ValueError):
        store.finish_sweep("s1", "running", "no")


def test_a_sweep_recorded_before_the_sweeps_table_is_still_listed(old_store):
    db = old_store(2)  # schema 2: sweep_cells only, as sweeps then wrote it
    for _ in range(2):  # as it was written, then migrated (an empty sweeps table)
        (sweep,) = read_sweeps(db)
        assert (sweep.sweep_id, sweep.state, sweep.experiment) == ("fixture-sweep", "completed", "fixture")
        assert sweep.counts()["finished"] == 1
        SweepStore(db)


def test_a_cell_held_by_its_writer_reads_running_without_waiting_for_it(live_store):
    """Another process holds the running cell's file (as a cell does mid-transaction):
    the reader gives up on that cell after a short wait instead of queueing behind it."""
    cell_db = cell_root(live_store) / "h-run" / CELL_DB
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import duckdb, sys
        con = duckdb.connect({str(cell_db)!r})
        print("held", flush=True)
        sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (sweep,) = read_sweeps(live_store)
        running = next(c for c in sweep.cells if c["config_hash"] == "h-run")
        assert (running["status"], running["step"]) == ("running", None)
    finally:
        holder.communicate("\n", timeout=30)


def test_reading_progress_writes_nothing(live_store):
    def files():
        return {p: p.read_bytes() for p in live_store.parent.rglob("*") if p.is_file()}

    before = files()
    read_sweeps(live_store)
    assert files() == before


def test_core_sweeps_prints_the_progress(live_store, cli):
    code, out, err = cli("sweeps", "--db", live_store)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ("rho (sweep s1): running, 4 cells: 1 finished, 1 failed, 0 stopped, "
                        "1 running, 1 pending")
    assert "  filter.rho=0.6 seed=0: running, step 3/10" in lines
    assert "  filter.rho=0.4 seed=0: failed (OSError: no weights)" in lines


def test_core_sweeps_one_sweep_lists_every_cell(live_store, cli):
    code, out, err = cli("sweeps", "s", "--db", live_store)
    assert code == 0, err
    assert "  filter.rho=0.9 seed=0: finished, success 0.750" in out.splitlines()
    assert "  filter.rho=0.2 seed=0: pending" in out.splitlines()


@pytest.mark.parametrize("args, message", [
    (["--db", "{tmp}/none.duckdb"], "error: --db '{tmp}/none.duckdb' does not exist"),
    (["nope", "--db", "{db}"], "error: no sweep 'nope' in {db}; sweeps: s1"),
    (["--last", "0", "--db", "{db}"], "error: --last 0: expected a count of at least 1"),
])
def test_core_sweeps_refuses_bad_input_in_one_line(live_store, cli, tmp_path, args, message):
    fill = {"tmp": tmp_path, "db": live_store}
    code, out, err = cli("sweeps", *[a.format(**fill) for a in args])
    assert (code, err.strip()) == (2, message.format(**fill))

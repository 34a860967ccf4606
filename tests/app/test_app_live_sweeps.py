"""The Sweeps tab while a sweep runs: its loaded cells, its running cells' steps read from
their own files, and the reason of a failed cell, on a store a sweep is writing."""

from __future__ import annotations

import json
import os
import socket

import pytest
from app_testing import infos, open_app

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore
from mirage.flows.cells import CELL_DB, OUTCOME, cell_root
from mirage.flows.sweep_store import SweepStore

CONFIG = RunConfig(steps=10).model_dump(mode="json")
# config hash -> (cell, status in the main store)
CELLS = {"h-done": ("filter.rho=0.9", "finished"), "h-run": ("filter.rho=0.6", "pending"),
         "h-bad": ("filter.rho=0.4", "pending"), "h-wait": ("filter.rho=0.2", "pending")}


def sweep_rows(config_hash: str, status: str) -> dict:
    return {"sweep_id": "s1", "experiment": "rho", "cell": CELLS[config_hash][0], "seed": 0,
            "config_hash": config_hash, "run_id": None, "status": status, "reused": False,
            "loaded": False, "error": None}


def running_sweep(db, *, loaded_one: bool) -> None:
    """A sweep recorded by this (live) process: one cell ended and loaded (when
    ``loaded_one``), one running at step 3 of 10 in its own file, one ended failed and
    not loaded yet, one not started."""
    store, sweeps = RunStore(db), SweepStore(db)
    rows = [sweep_rows(h, "pending") for h in CELLS]
    sweeps.start_sweep("s1", "rho", rows, host=socket.gethostname(), pid=os.getpid())
    if loaded_one:
        store.create_run("run-done", CONFIG, [], None, experiment="rho", cell="filter.rho=0.9", seed=0)
        store.record_step("run-done", 10, {"val/success": 0.75})
        store.set_status("run-done", "finished")
        sweeps.update_sweep_cell("s1", sweep_rows("h-done", "finished") | {"run_id": "run-done",
                                                                           "success": 0.75})
    cell = RunStore(cell_root(db) / "h-run" / CELL_DB)
    cell.create_run("run-live", CONFIG, [], None, experiment="rho", cell="filter.rho=0.6", seed=0)
    for step in range(4):
        cell.record_step("run-live", step, {"train/return": 0.1})
    failed = cell_root(db) / "h-bad"
    failed.mkdir()
    (failed / OUTCOME).write_text(json.dumps({"status": "failed", "run_id": None,
                                              "error": "OSError: no weights\ntraceback..."}))


def progress_table(at):
    (table,) = [d.value for d in at.dataframe if "step" in d.value.columns]
    return table.set_index("cell")


def test_the_sweeps_tab_shows_a_running_sweeps_cells(tmp_path, monkeypatch):
    db = tmp_path / "runs" / "main.duckdb"
    running_sweep(db, loaded_one=True)
    at = open_app(db, monkeypatch)
    table = progress_table(at)
    assert table.loc["filter.rho=0.9", ["status", "success", "run_id"]].tolist() == ["finished", 0.75, "run-done"]
    assert table.loc["filter.rho=0.6", ["status", "step"]].tolist() == ["running", "3/10"]
    assert table.loc["filter.rho=0.4", ["status", "error"]].tolist() == ["failed", "OSError: no weights"]
    assert table.loc["filter.rho=0.2", ["status", "step"]].tolist() == ["pending", ""]
    (bar,) = at.get("progress")
    assert bar.proto.text == ("rho (sweep s1): running, 4 cells: 1 finished, 1 failed, 0 stopped, "
                              "1 running, 1 pending")
    assert at.selectbox(key="sweep_progress").value == "s1"
    assert any("a sweep running" in c.value for c in at.caption)  # the page re-reads itself


def test_a_sweep_with_no_cell_ended_yet_is_shown_on_an_empty_store(tmp_path, monkeypatch):
    db = tmp_path / "runs" / "main.duckdb"
    running_sweep(db, loaded_one=False)
    at = open_app(db, monkeypatch)
    assert any("has no runs yet" in text for text in infos(at))
    table = progress_table(at)
    assert table.loc["filter.rho=0.6", "step"] == "3/10"
    assert table.loc["filter.rho=0.9", "status"] == "pending"

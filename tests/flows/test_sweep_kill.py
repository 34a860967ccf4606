"""issue 22 (2): a killed ``core sweep`` leaves no process behind (Prefect servers, the
pool's workers, the resource tracker) and no half-written cell."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml

from mirage.core.store.run_store import RunStore
from .conftest import kill_tree

REPO = Path(__file__).resolve().parents[2]


def family(root: int) -> set[psutil.Process]:
    """The supervisor, its descendants and every process in their process groups."""
    try:
        members = {psutil.Process(root), *psutil.Process(root).children(recursive=True)}
    except psutil.NoSuchProcess:
        members = set()
    groups = set()
    for member in members:
        try:
            groups.add(os.getpgid(member.pid))
        except ProcessLookupError:
            pass
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) in groups:
                members.add(process)
        except (ProcessLookupError, psutil.Error):
            pass
    return members


def alive(processes: set[psutil.Process]) -> list[psutil.Process]:
    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
        except psutil.NoSuchProcess:
            pass
    return left


def command_line(process: psutil.Process) -> str:
    """The process's command line; empty when it ended since it was listed (short-lived
    children such as a run's ``git`` calls come and go while the sweep works)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


@pytest.mark.slow
@pytest.mark.xdist_group("busy")  # busy processes: one such test at a time
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_sweep_leaves_no_process_and_no_half_written_cell(tmp_path, cli_argv, sig):
    registry = tmp_path / "registry.yaml"
    # The tiny policy's groups all have equal returns, so top_p keeps nothing and a run
    # would stop after max_empty_steps steps: a cell could finish (and be imported
    # into the main store) before the kill. Lifting the limit keeps every cell running.
    registry.write_text(yaml.safe_dump({"experiments": {"long": {
        "base": {"env": {"name": "frozenlake"}, "max_empty_steps": 10_000},
        "grid": {"filter.rho": [0.5, 0.7, 0.9, 1.0]}}}}))
    db = tmp_path / "runs" / "main.duckdb"
    log = (tmp_path / "sweep.log").open("w")
    sweep = subprocess.Popen(
        cli_argv("sweep", "long", "--preset", "tiny", "--set", "steps=400", "--width", "2",
                 "--db", db, "--registry", registry),
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        # The flow starts a temporary Prefect server (its pool workers report to it); on a
        # loaded machine the default 20 s for it to answer is not enough.
        env={**os.environ, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"},
        start_new_session=True,  # the test's own group: cleanup below cannot hit pytest
    )
    cells = db.parent / "cells"
    try:
        deadline = time.monotonic() + 240
        while len(list(cells.glob("*/cell.duckdb"))) < 2:  # both pool workers are in a cell
            assert sweep.poll() is None, (tmp_path / "sweep.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "no cell started within 240 s"
            time.sleep(0.5)
        started = family(sweep.pid)
        names = " ".join(command_line(p) for p in alive(started))
        assert "uvicorn" in names and "spawn_main" in names  # servers and pool workers exist
        sweep.send_signal(sig)
        deadline = time.monotonic() + 20
        while alive(started) and time.monotonic() < deadline:
            time.sleep(0.25)
        survivors = alive(started)
        assert survivors == [], [command_line(p)[:120] for p in survivors]
    finally:
        for process in alive(family(sweep.pid)):
            kill_tree(process)
        sweep.wait(10)
        log.close()
    # No half-written cell: a cell either recorded a whole outcome or none (the re-run
    # reruns it), and the main store holds no run of the killed sweep.
    for directory in cells.iterdir():
        outcome = directory / "outcome.json"
        if outcome.exists():
            assert json.loads(outcome.read_text())["status"] in ("finished", "stopped", "failed")
    assert not db.exists() or RunStore(db).list_runs() == []

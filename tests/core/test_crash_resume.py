"""A `core run` killed with SIGKILL is reported as crashed and resumes to the end; while
its process is alive (here: frozen with SIGSTOP) it is running and cannot be resumed or
deleted. `core run --set/--name/--tag/--note` are stored; bad --set input changes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from mirage.core.store.run_store import RunStore


def wait_for_row(db, proc) -> dict:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if db.exists():
            runs = RunStore(db).list_runs()
            if runs:
                return runs[0]
        time.sleep(0.05)
    raise AssertionError("the run never created its row")


def freeze_outside_the_store(db, proc) -> None:
    """SIGSTOP the run at a moment it holds no lock on ``db``: a run frozen inside one of
    its writes would hold the file's lock for as long as it stays frozen, and every later
    command would wait for it (on a busy machine a run spends more of its time writing)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        os.kill(proc.pid, signal.SIGSTOP)
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
            time.sleep(0.001)  # stopped: it can take no lock from here on
        try:
            duckdb.connect(str(db), read_only=True).close()
            return
        except duckdb.IOException as error:  # frozen holding the lock: let it finish the write
            if "Could not set lock" not in str(error):
                raise
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("the run held the store's lock at every try for 60 s")


def listed(cli, db, *args) -> list[dict]:
    code, out, err = cli("runs", "--json", "--db", db, *args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow  # kills a real run and resumes it: 16 s
def test_a_killed_run_is_crashed_and_resumes(cli, cli_argv, tiny_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    proc = subprocess.Popen(
        cli_argv("run", "--config", tiny_config_file, "--db", db, "--quiet", "--name", "victim",
                 "--tag", "crash", "--tag", "test", "--note", "killed on purpose",
                 "--set", "steps=8", "--set", "algorithm.lr=0.002", "--set", "max_empty_steps=50"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        row = wait_for_row(db, proc)
        freeze_outside_the_store(db, proc)  # alive but frozen: the checks below see it running
        run_id = row["run_id"]
        assert row["pid"] == proc.pid and row["heartbeat_at"] is not None  # recorded with the row
        assert (row["name"], row["tags"], row["note"]) == ("victim", ["crash", "test"], "killed on purpose")
        assert row["config"]["steps"] == 8 and row["config"]["algorithm"]["lr"] == 0.002
        assert row["environment"]["python"] and "torch" in row["environment"]["packages"]
        assert [r["status"] for r in listed(cli, db)] == ["running"]
        code, out, err = cli("run", "--resume", "victim", "--db", db, "--quiet")
        assert code == 2 and "is still running (pid" in err
        code, out, err = cli("delete", "victim", "--yes", "--db", db)
        assert code == 2 and "still running" in err
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert RunStore(db).get_run(run_id)["status"] == "running"  # as stored ...
    assert [r["run_id"] for r in listed(cli, db, "--status", "crashed")] == [run_id]  # ... as shown
    code, out, err = cli("show", run_id[:17], "--db", db)
    assert code == 0 and "status   crashed (stored: running; pid" in out

    code, out, err = cli("run", "--resume", "victim", "--db", db, "--quiet", "--lr", "0.1")
    assert code == 2 and err.strip().startswith(f"error: --resume '{run_id}'") and "--lr cannot be changed" in err
    code, out, err = cli("run", "--resume", run_id, "--db", db, "--quiet",
                         "--set", "algorithm.lr=0.1", "--tag", "again")
    assert code == 2 and "--set algorithm.lr, --tag cannot be changed" in err and "core tag" in err

    code, out, err = cli("run", "--resume", "victim", "--db", db, "--quiet")
    assert code == 0, err
    store = RunStore(db)
    done = store.get_run(run_id)
    assert (done["status"], done["last_step"], done["config"]["algorithm"]["lr"]) == ("finished", 8, 0.002)
    assert done["pid"] not in (None, proc.pid)  # the resuming process replaced the dead one
    steps = [s for s, name, _ in store.metrics(run_id) if name == "train/return"]
    assert steps == list(range(9))
    assert any(e["kind"] == "resumed" for e in store.events(run_id))
    assert [r["status"] for r in listed(cli, db)] == ["finished"]


def test_run_refuses_bad_settings_and_a_taken_name_before_anything_runs(cli, tiny_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    for args, expected in (
        (["--set", "filter.rhoo=0.5"], "--set filter.rhoo: unknown config path; valid under filter:"),
        (["--set", "steps=lots"], "--set steps=lots: Input should be a valid integer"),
        (["--set", "steps"], "--set expects PATH=VALUE"),
        (["--name", " "], "--name: a run name cannot be only whitespace"),
    ):
        code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--quiet", *args)
        assert code == 2 and err.strip() == f"error: {err.strip().removeprefix('error: ')}"
        assert expected in err and len(err.strip().splitlines()) == 1
    assert not db.exists()
    RunStore(db).create_run("r1", {}, [], None, name="taken")
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--quiet", "--name", "taken")
    assert code == 2 and "name 'taken' is taken by run r1" in err
    assert [r["run_id"] for r in RunStore(db).list_runs()] == ["r1"]


def test_sweep_set_and_grid_paths_use_the_same_parser(cli, tmp_path):
    code, out, err = cli("sweep", "rho", "--set", "steps=lots", "--db", tmp_path / "m.duckdb")
    assert code == 2 and "--set steps=lots: Input should be a valid integer" in err
    code, out, err = cli("sweep", "rho", "--grid", "filter.rhoo=[0.5]", "--db", tmp_path / "m.duckdb")
    assert code == 2 and "--grid filter.rhoo: unknown config path" in err
    assert not (tmp_path / "m.duckdb").exists()

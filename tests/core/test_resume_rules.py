"""issue 22 (1): a resume never destroys results. A finished run is refused unless its
steps are explicitly extended; steps a missing checkpoint covered are never deleted; the
store's reopening of a run is one transaction."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mirage.core.config.run_config import RunConfig
from mirage.core.run.checkpoints import checkpoint_root
from mirage.core.store.run_store import GroupRow, RunStore


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def stored_run(db: Path, status: str, last_step: int, tiny_config) -> str:
    """A run of the tiny config with steps 0..last_step recorded and no checkpoint beside
    the store: the shape of every run a sweep loaded into the main store."""
    store = RunStore(db)
    config = RunConfig.model_validate(tiny_config()).model_dump(mode="json")
    store.create_run("r1", config, [], None, seed=0)
    for step in range(last_step + 1):
        store.record_step("r1", step, {"train/return": float(step)},
                          [GroupRow(0, step, 0.5, 0.25, 0.5, True)])
        store.record_event("r1", step, "note", f"step {step}")
    if status != "running":
        store.set_status("r1", status, None if status == "finished" else "boom")
    return "r1"


def refused(cli, db: Path, *args: str) -> str:
    before = digest(db.parent)
    code, out, err = cli("run", "--db", db, "--quiet", *args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert digest(db.parent) == before, "a refused resume changed the store"
    return lines[0]


def test_resuming_a_finished_run_is_refused_and_changes_nothing(cli, tmp_path, tiny_config):
    db = tmp_path / "runs.duckdb"
    run_id = stored_run(db, "finished", RunConfig.model_validate(tiny_config()).steps, tiny_config)
    row = RunStore(db).get_run(run_id)
    line = refused(cli, db, "--resume", run_id)
    assert f"run {run_id} is finished" in line and "--steps N" in line
    again = RunStore(db).get_run(run_id)
    assert (again["status"], again["finished_at"], again["last_step"]) == (
        "finished", row["finished_at"], row["last_step"])
    assert not [e for e in RunStore(db).events(run_id) if e["kind"] == "resumed"]


def test_extending_a_finished_run_needs_its_final_checkpoint(cli, tmp_path, tiny_config):
    db = tmp_path / "runs.duckdb"
    steps = RunConfig.model_validate(tiny_config()).steps
    run_id = stored_run(db, "finished", steps, tiny_config)
    line = refused(cli, db, "--resume", run_id, "--steps", str(steps + 2))
    assert str(checkpoint_root(RunStore(db), run_id)) in line
    assert f"would delete steps 1-{steps}" in line


@pytest.mark.parametrize("status", ["running", "failed", "stopped"])
def test_steps_a_missing_checkpoint_covered_are_never_deleted(cli, tmp_path, tiny_config, status):
    """A run killed (running), failed or stopped at step 9 with checkpoints every 2 steps
    must have one at step 7 or later; without it the resume would drop 1-9."""
    db = tmp_path / "runs.duckdb"
    config = tiny_config()
    config["steps"], config["checkpoint_every"] = 12, 2
    run_id = stored_run(db, status, 9, lambda: config)
    line = refused(cli, db, "--resume", run_id)
    assert "no checkpoint at step 7 or later" in line and "steps 1-9" in line
    assert [s for s, _, _ in RunStore(db).metrics(run_id)] == list(range(10))


def test_reopening_a_run_is_one_transaction(tmp_path, tiny_config, contents):
    """resume_run deletes the later steps, reopens the run and records the event in one
    transaction: if any part fails, nothing of it is kept."""
    db = tmp_path / "runs.duckdb"
    run_id = stored_run(db, "finished", 4, tiny_config)
    store = RunStore(db)
    before = contents(store)
    with pytest.raises(Exception, match="NOT NULL"):
        store.resume_run(run_id, 2, None)  # the event's message is NOT NULL: the last write fails
    assert contents(store) == before
    store.resume_run(run_id, 2, "resumed from checkpoint at step 2")
    row = store.get_run(run_id)
    assert (row["status"], row["last_step"], row["finished_at"]) == ("running", 2, None)
    assert sorted({s for s, _, _ in store.metrics(run_id)}) == [0, 1, 2]
    assert [e["step"] for e in store.events(run_id) if e["kind"] == "resumed"] == [2]


@pytest.mark.slow
def test_a_finished_run_is_extended_only_when_asked(cli, make_config_file, tiny_config, tmp_path):
    db = tmp_path / "runs" / "mirage.duckdb"
    config = make_config_file("extend.yaml", max_empty_steps=20)
    code, out, err = cli("run", "--config", config, "--db", db, "--quiet", "--steps", "2")
    assert code == 0, err
    run_id = RunStore(db).list_runs()[0]["run_id"]
    refused(cli, db, "--resume", run_id)
    code, out, err = cli("run", "--resume", run_id, "--steps", "3", "--db", db, "--quiet")
    assert code == 0, err
    store = RunStore(db)
    row = store.get_run(run_id)
    assert (row["status"], row["last_step"], row["config"]["steps"]) == ("finished", 3, 3)
    assert sorted({s for s, _, _ in store.metrics(run_id)}) == [0, 1, 2, 3]
    assert [e["step"] for e in store.events(run_id) if e["kind"] == "resumed"] == [2]

"""Stores written by every schema version the project has shipped open with today's code:
they migrate (each migration recorded, in order), every public read gives what the old
code wrote, the command line reads them, and new runs and sweeps go into them.

The files (tests/core/data/stores/schema_N.duckdb.gz) were written FOR REAL by the code
that shipped each version: one tiny run through that commit's ``core run``, plus a
one-cell sweep in the versions that had the sweep tables (README.md there says how).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from mirage.app import queries
from mirage.app.reader import StoreReader
from mirage.core.cli.program import app
from mirage.core.config.run_config import config_hash
from mirage.core.run.validate import build_config
from mirage.core.store.export import export_runs
from mirage.core.store.file import SCHEMA_VERSION
from mirage.core.store.migrations import MIGRATIONS
from mirage.core.store.rollouts import RolloutRow
from mirage.core.store.run_store import GroupRow, RunStore
from mirage.flows.progress import read_sweeps
from mirage.flows.sweep_store import SweepStore

STORES = Path(__file__).parent / "data" / "stores"


@dataclass(frozen=True)
class Known:
    """What a fixture holds: one finished 2-step run (seed 1) and, from schema 2 on, one
    finished cell of sweep ``fixture-sweep``."""

    run_id: str
    commit: str  # the commit whose code wrote it
    metrics: int  # metric rows (the metric names grew between versions)
    events: tuple[str, ...]
    rollouts: int  # sampled rollout rows (schema 1 had no rollouts table)
    sweep: bool  # has the fixture sweep


KNOWN = {
    1: Known("20261204-124601-85a6c9", "5ae43e0", 63, ("backend",), 0, sweep=False),
    2: Known("20261204-124730-45b010", "a883abe", 155, ("backend", "environment"), 60, sweep=True),
    3: Known("20261204-124900-45319f", "95a7669", 155, ("backend", "environment"), 60, sweep=True),
    4: Known("20261204-131358-23d277", "5cf0acf", 155, ("backend", "environment"), 60, sweep=True),
    5: Known("20261205-011838-e691d5", "2847123", 155, ("backend", "environment"), 60, sweep=True),
    6: Known("20261205-042756-26274f", "c55104d", 155, ("backend", "environment"), 60, sweep=True),
    7: Known("20261206-113408-774e82", "43d3b83", 155, ("backend", "environment"), 60, sweep=True),
}
VERSIONS = sorted(KNOWN)


def fixture_versions() -> set[int]:
    return {int(p.name.removeprefix("schema_").removesuffix(".duckdb.gz"))
            for p in STORES.glob("schema_*.duckdb.gz")}


def ledger(db: Path) -> list[tuple[int, str]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT version, description FROM schema_migrations"
                           " ORDER BY applied_at, version").fetchall()


def stored_version(db: Path) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT max(version) FROM schema_version").fetchone()[0]


def test_every_schema_version_up_to_todays_has_a_fixture_store():
    missing = sorted(set(range(1, SCHEMA_VERSION + 1)) - fixture_versions())
    assert not missing, (
        f"no fixture store for schema {missing}: write tests/core/data/stores/"
        f"schema_{SCHEMA_VERSION}.duckdb.gz with the commit that ships it (build_fixture.py, "
        "README.md there) and add what it holds to KNOWN here")
    assert sorted(fixture_versions()) == VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
def test_a_fixture_holds_the_schema_it_is_named_for(version, old_store):
    assert stored_version(old_store(version)) == version


@pytest.mark.parametrize("version", VERSIONS)
def test_opening_migrates_to_today_and_records_each_migration_in_order(version, old_store):
    db = old_store(version)
    RunStore(db)
    assert stored_version(db) == SCHEMA_VERSION
    # A file made since the ledger (schema 3) lists every migration from its creation;
    # an older one lists those applied on opening it.
    expected = [(m.version, m.description) for m in MIGRATIONS if version >= 3 or m.version > version]
    assert ledger(db) == expected
    RunStore(db)  # opening it again changes nothing
    assert ledger(db) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_the_public_reads_give_what_the_old_code_wrote(version, old_store):
    known = KNOWN[version]
    store = RunStore(old_store(version))
    (run,) = store.list_runs()
    assert run == store.get_run(known.run_id)
    assert (run["run_id"], run["status"], run["last_step"], run["seed"]) == (
        known.run_id, "finished", 2, 1)
    assert run["git_commit"].startswith(known.commit)
    assert run["config"]["steps"] == 2 and run["config"]["rollout"]["group_size"] == 4
    # until schema 6 each ran its run seed's own warm start (the default then), and still
    # reads so; from 6 on it ran the shared one (seed 0, left unset)
    seeds = build_config(run["config"]).model.options
    assert seeds["warmstart_seed"] is None if version < 6 else "warmstart_seed" not in seeds
    # its hash is stored (by migration 6, with the one it was known by, or when created)
    assert run["config_hash"] == config_hash(run["config"])
    assert (run["original_hash"] is None) == (version >= 6)
    assert run["created_at"].tzinfo is not None and run["finished_at"] >= run["created_at"]
    if version < 3:  # the columns schema 3 added read their defaults
        assert (run["name"], run["tags"], run["note"], run["environment"]) == (None, [], None, {})
    metrics = store.metrics(known.run_id)
    assert len(metrics) == known.metrics and {step for step, _, _ in metrics} == {0, 1, 2}
    assert store.final_metrics(known.run_id, ["val/success", "train/return"]) == {
        "val/success": 0.0, "train/return": -0.5}
    assert [s for s, _, _ in store.metrics(known.run_id, "val/success")] == [0, 2]
    groups = store.groups(known.run_id)
    assert len(groups) == 6 and {g["step"] for g in groups} == {0, 1, 2}
    assert len(store.groups(known.run_id, 1)) == 2
    assert tuple(e["kind"] for e in store.events(known.run_id)) == known.events
    rollouts = store.rollouts(known.run_id)
    assert len(rollouts) == known.rollouts
    assert all(r["prompt"] for r in rollouts)
    assert all(r["images"] == [] for r in rollouts)  # text turns: no pictures (schema 7 on)


@pytest.mark.parametrize("version", VERSIONS)
def test_runs_and_show_read_it(version, old_store):
    db, known = old_store(version), KNOWN[version]
    listed = CliRunner().invoke(app, ["runs", "--db", str(db)])
    assert listed.exit_code == 0, listed.output
    assert known.run_id in listed.stdout and "finished" in listed.stdout
    shown = CliRunner().invoke(app, ["show", known.run_id[:15], "--db", str(db), "--json"])
    assert shown.exit_code == 0, shown.output
    record = json.loads(shown.stdout)
    assert record["run_id"] == known.run_id and record["last_metrics"]["val/success"] == 0.0
    assert tuple(e["kind"] for e in record["events"]) == known.events


@pytest.mark.parametrize("version", VERSIONS)
def test_export_and_import_copy_it_whole(version, old_store, tmp_path):
    known = KNOWN[version]
    old = old_store(version)
    unmigrated = RunStore(tmp_path / "as-a-cell.duckdb")  # older cell files import as written
    assert unmigrated.import_runs(old) == [known.run_id]
    store = RunStore(old)
    again = RunStore(tmp_path / "again.duckdb")
    assert again.import_runs(store.path) == [known.run_id]
    for copy in (unmigrated, again):
        assert copy.metrics(known.run_id) == store.metrics(known.run_id)
        assert copy.rollouts(known.run_id) == store.rollouts(known.run_id)
        assert [e["kind"] for e in copy.events(known.run_id)] == list(known.events)
    runs_file, metrics_file, rollouts_file = export_runs(store.path, [known.run_id], tmp_path / "out", "jsonl")
    (exported,) = [json.loads(line) for line in runs_file.read_text().splitlines()]
    assert exported["run_id"] == known.run_id and exported["config"]["steps"] == 2
    assert len(metrics_file.read_text().splitlines()) == known.metrics
    turns = [json.loads(line) for line in rollouts_file.read_text().splitlines()]
    assert len(turns) == known.rollouts and all(t["images"] == [] for t in turns)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_sweep_views_read_it_before_and_after_migrating(version, old_store):
    db, known = old_store(version), KNOWN[version]
    for _ in range(2):  # as written (read-only readers never migrate), then migrated
        sweeps = read_sweeps(db)
        if not known.sweep:
            assert sweeps == []
        else:
            (sweep,) = sweeps
            assert (sweep.sweep_id, sweep.experiment, sweep.state) == (
                "fixture-sweep", "fixture", "completed")
            (cell,) = sweep.cells
            assert (cell["cell"], cell["status"], cell["run_id"]) == ("seed=1", "finished", known.run_id)
        RunStore(db)
    cells = SweepStore(db).sweep_cells()
    assert [c["run_id"] for c in cells] == ([known.run_id] if known.sweep else [])
    if known.sweep:  # "loaded" came with the live sweeps; older rows read NULL
        assert cells[0]["loaded"] is (None if version == 2 else False)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_app_reads_it(version, old_store):
    db, known = old_store(version), KNOWN[version]
    RunStore(db)
    reader = StoreReader(db)
    frame = queries.runs(reader)
    assert frame["run_id"].tolist() == [known.run_id] and frame["status"].tolist() == ["finished"]
    assert "val/success" in queries.metric_names(reader, [known.run_id])


@pytest.mark.parametrize("version", VERSIONS)
def test_a_new_run_and_a_new_sweep_are_written_into_it(version, old_store):
    db, known = old_store(version), KNOWN[version]
    store = RunStore(db)
    store.create_run("new", {"steps": 1}, [{"name": "mirage", "version": "0"}], None, seed=3,
                     name="fresh", tags=["after-migration"], environment={"python": "3"},
                     process={"pid": 1, "host": "here", "process_started": 0.0})
    store.record_step("new", 1, {"val/success": 1.0}, [GroupRow(0, 7, 1.0, 0.0, 0.0, True)],
                      [RolloutRow(0, 0, 0, "X <think>", "Z", "Up", 1.0)])
    store.record_event("new", 1, "note", "written by today's code")
    store.set_status("new", "finished")
    assert [r["run_id"] for r in store.list_runs()] == [known.run_id, "new"]
    run = store.get_run("new")
    assert (run["name"], run["tags"], run["environment"], run["last_step"]) == (
        "fresh", ["after-migration"], {"python": "3"}, 1)
    assert store.rollouts("new")[0]["reasoning"] == "Z" and store.groups("new")[0]["seed"] == 7
    assert [e["kind"] for e in store.events("new")] == ["note"]
    assert len(store.metrics(known.run_id)) == known.metrics  # the old run is untouched
    sweeps = SweepStore(db)
    sweeps.start_sweep("new-sweep", "e", [{"sweep_id": "new-sweep", "experiment": "e", "cell": "c",
                                           "config_hash": "h", "status": "pending", "reused": False}],
                       host="here", pid=1)
    sweeps.finish_sweep("new-sweep", "completed", "e: 1 cells")
    assert [c["status"] for c in sweeps.sweep_cells("new-sweep")] == ["pending"]
    assert {s.sweep_id for s in read_sweeps(db)} == {"new-sweep"} | (
        {"fixture-sweep"} if known.sweep else set())

"""A store written by older code opens, gains the new tables and columns through the
recorded, ordered migrations, and still imports (and is imported by) other stores. (Stores
written FOR REAL by each shipped version: test_store_fixtures.py.)"""

from __future__ import annotations

import json
from datetime import datetime

import duckdb
import pytest

from mirage.core.store.file import SCHEMA_VERSION
from mirage.core.store.migrations import MIGRATIONS
from mirage.core.store.run_store import RunStore

# The DDL of schema version 2, as code before schema 3 wrote it (kept here on purpose:
# the store's own DDL may change, old files do not).
SCHEMA_2 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, status TEXT NOT NULL, config TEXT NOT NULL,
    plugins TEXT NOT NULL, git_commit TEXT, experiment TEXT, cell TEXT, seed BIGINT,
    last_step INTEGER, error TEXT, created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL, finished_at TIMESTAMP
);
CREATE TABLE metrics (run_id TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, value DOUBLE NOT NULL);
CREATE TABLE groups (
    run_id TEXT NOT NULL, step INTEGER NOT NULL, prompt_index INTEGER NOT NULL,
    seed BIGINT NOT NULL, reward_mean DOUBLE, reward_variance DOUBLE, reward_std DOUBLE,
    kept BOOLEAN NOT NULL
);
CREATE SEQUENCE events_seq;
CREATE TABLE events (
    event_id BIGINT DEFAULT nextval('events_seq'), run_id TEXT NOT NULL,
    step INTEGER NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL, "at" TIMESTAMP NOT NULL
);
CREATE TABLE rollouts (
    run_id TEXT NOT NULL, step INTEGER NOT NULL, prompt_index INTEGER NOT NULL,
    sample_index INTEGER NOT NULL, turn INTEGER NOT NULL, prompt TEXT NOT NULL,
    reasoning TEXT NOT NULL, action TEXT NOT NULL, reward DOUBLE NOT NULL
);
INSERT INTO schema_version VALUES (2);
"""


def schema_2_store(path, run_id="old", config: dict | None = None) -> None:
    con = duckdb.connect(str(path))
    con.execute(SCHEMA_2)
    now = datetime(2026, 1, 2, 3, 4, 5)
    con.execute("INSERT INTO runs (run_id, status, config, plugins, git_commit, seed, last_step,"
                " created_at, updated_at, finished_at) VALUES (?, 'finished', ?, '[]',"
                " 'abc', 0, 1, ?, ?, ?)", [run_id, json.dumps(config or {"steps": 1}), now, now, now])
    con.execute("INSERT INTO metrics VALUES (?, 1, 'val/success', 0.5)", [run_id])
    con.close()


def test_migrations_are_numbered_in_order_up_to_the_schema_version():
    versions = [m.version for m in MIGRATIONS]
    assert versions == sorted(set(versions)) and versions[-1] == SCHEMA_VERSION == 7
    assert all(m.description for m in MIGRATIONS)


def test_a_schema_2_store_opens_gains_the_columns_and_records_the_migration(tmp_path):
    db = tmp_path / "old.duckdb"
    schema_2_store(db)
    store = RunStore(db)
    row = store.get_run("old")
    assert (row["status"], row["git_commit"], row["last_step"]) == ("finished", "abc", 1)
    assert (row["name"], row["tags"], row["note"], row["environment"]) == (None, [], None, {})
    assert (row["pid"], row["host"], row["heartbeat_at"]) == (None, None, None)
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        ledger = con.execute("SELECT version, description FROM schema_migrations ORDER BY version").fetchall()
    finally:
        con.close()
    assert [v for v, _ in ledger] == [3, 4, 5, 6, 7] and "heartbeat" in ledger[0][1]
    store.update_run("old", name="baseline", tags=["a"])  # the new columns take writes
    assert RunStore(db).get_run("old")["tags"] == ["a"]
    assert store.metrics("old") == [(1, "val/success", 0.5)]


def test_a_new_store_records_every_migration(tmp_path):
    store = RunStore(tmp_path / "new.duckdb")
    con = duckdb.connect(str(store.path), read_only=True)
    try:
        assert [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY version")
                .fetchall()] == [m.version for m in MIGRATIONS]
    finally:
        con.close()


def test_schema_2_cell_files_import_into_a_current_store_and_back(tmp_path):
    schema_2_store(tmp_path / "cell.duckdb", "from-cell")
    main = RunStore(tmp_path / "main.duckdb")
    assert main.import_runs(tmp_path / "cell.duckdb") == ["from-cell"]
    assert main.get_run("from-cell")["tags"] == []
    main.create_run("labelled", {"steps": 1}, [], None, name="n", tags=["t"], environment={"python": "3"})
    other = RunStore(tmp_path / "other.duckdb")
    assert other.import_runs(main.path) == ["from-cell", "labelled"]
    row = other.get_run("labelled")
    assert (row["name"], row["tags"], row["environment"]) == ("n", ["t"], {"python": "3"})


def test_a_store_newer_than_the_code_is_refused(tmp_path):
    db = tmp_path / "future.duckdb"
    schema_2_store(db)
    con = duckdb.connect(str(db))
    con.execute("UPDATE schema_version SET version = 99")
    con.close()
    with pytest.raises(RuntimeError, match=f"schema 99 is newer than {SCHEMA_VERSION}"):
        RunStore(db)


# A run config as code between issue #21 and #31 stored it: the local backend's options
# without a warm-start seed, which then meant the run seed.
BEFORE_31 = {"seed": 3, "model": {"backend": "local", "path": None, "options": {"hidden": 64}}}


def test_migration_5_names_the_warm_start_seed_old_runs_ran_with(tmp_path):
    """Runs stored before the warm-start seed's default became 0 ran with their run
    seed's own warm start: the migration writes that down (None), so a resume or a sweep
    reads them as they ran, and the hash they were known by stays."""
    from mirage.core.config.legacy import original_hash
    from mirage.core.config.run_config import config_hash

    db = tmp_path / "old.duckdb"
    schema_2_store(db, "per-seed", BEFORE_31)
    named = {**BEFORE_31, "model": {**BEFORE_31["model"], "options": {"hidden": 64, "warmstart_seed": None}}}
    row = RunStore(db).get_run("per-seed")
    assert row["config"]["model"]["options"] == {"hidden": 64, "warmstart_seed": None}
    assert row["config_hash"] == config_hash(named) != config_hash(BEFORE_31)
    assert row["original_hash"] == original_hash(named) != original_hash({**BEFORE_31, "seed": 0})


# A run config as code before issue #21 stored it: the local backend's settings flat.
FLAT = {"seed": 2, "filter": {"name": "quartile", "quartile": 3},
        "model": {"backend": "local", "path": None, "hidden": 64, "decoder": "lean"}}


def test_migration_6_stores_configs_in_todays_layout_with_their_hashes(tmp_path):
    """The hash of a run is computed once: the migration rewrites every stored config to
    today's layout, stores its hash and keeps the one it was known by; a sweep cell of
    the run follows it."""
    from mirage.core.config.legacy import original_hash
    from mirage.core.config.run_config import config_hash

    db = tmp_path / "old.duckdb"
    schema_2_store(db, "flat", FLAT)
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE sweep_cells (sweep_id TEXT, experiment TEXT, cell TEXT, seed BIGINT,"
                " config_hash TEXT, run_id TEXT, status TEXT, reused BOOLEAN, error TEXT, success DOUBLE,"
                " retrieval_acc DOUBLE, entropy DOUBLE, kept_ratio DOUBLE, recorded_at TIMESTAMP)")
    con.execute("INSERT INTO sweep_cells VALUES ('s', 'e', 'c', 2, ?, 'flat', 'finished', false,"
                " NULL, NULL, NULL, NULL, NULL, now())", [original_hash(FLAT)])
    con.close()
    row = RunStore(db).get_run("flat")
    today = {"seed": 2, "filter": {"name": "quartile", "options": {"quartile": 3}},
             "model": {"backend": "local", "path": None, "options": {"hidden": 64, "warmstart_seed": None}}}
    assert row["config"] == today
    assert (row["config_hash"], row["original_hash"]) == (config_hash(today), original_hash(FLAT))
    assert row["config_hash"] != row["original_hash"]
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT config_hash FROM sweep_cells").fetchall() == [(config_hash(today),)]


def test_runs_imported_from_an_older_file_get_the_same_rewrite(tmp_path):
    schema_2_store(tmp_path / "cell.duckdb", "per-seed", BEFORE_31)
    main = RunStore(tmp_path / "main.duckdb")
    main.create_run("today", BEFORE_31, [], None)  # written by today's code: unset means 0
    assert main.import_runs(tmp_path / "cell.duckdb") == ["per-seed"]
    assert main.get_run("per-seed")["config"]["model"]["options"]["warmstart_seed"] is None
    assert "warmstart_seed" not in main.get_run("today")["config"]["model"]["options"]
    other = RunStore(tmp_path / "other.duckdb")  # from a current file: copied as it is
    assert sorted(other.import_runs(main.path)) == ["per-seed", "today"]
    assert "warmstart_seed" not in other.get_run("today")["config"]["model"]["options"]


def test_runs_imported_from_an_older_file_are_brought_to_todays_layout_and_hashed(tmp_path):
    from mirage.core.config.legacy import current_layout, original_hash
    from mirage.core.config.run_config import config_hash

    schema_2_store(tmp_path / "cell.duckdb", "flat", FLAT)
    main = RunStore(tmp_path / "main.duckdb")
    assert main.import_runs(tmp_path / "cell.duckdb") == ["flat"]
    row = main.get_run("flat")
    assert row["config"] == current_layout(FLAT)
    assert (row["config_hash"], row["original_hash"]) == (config_hash(current_layout(FLAT)),
                                                          original_hash(FLAT))


def test_migration_7_gives_stored_turns_an_empty_list_of_pictures(tmp_path):
    """Turns stored before image observations read back as they were written, with no
    pictures; a turn written after it keeps its PNG bytes."""
    from mirage.core.store.rollouts import RolloutRow

    db = tmp_path / "old.duckdb"
    schema_2_store(db)
    with duckdb.connect(str(db)) as con:
        con.execute("INSERT INTO rollouts VALUES ('old', 1, 0, 0, 0, 'X <think>', 'Z', 'Up', 0.5)")
    store = RunStore(db)
    assert store.rollouts("old") == [{"step": 1, "prompt_index": 0, "sample_index": 0, "turn": 0,
                                      "prompt": "X <think>", "reasoning": "Z", "action": "Up",
                                      "reward": 0.5, "images": []}]
    png = b"\x89PNG\r\n\x1a\n" + b"rest"
    store.record_step("old", 2, {}, rollouts=[RolloutRow(0, 0, 0, "<image> <think>", "Z", "Up", 1.0, (png,))])
    assert [r["images"] for r in store.rollouts("old")] == [[], [png]]

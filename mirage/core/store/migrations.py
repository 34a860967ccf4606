"""The run store's schema changes, applied in order to files written by older code.

A store file records its version in ``schema_version`` (the highest row wins) and, from
version 3 on, one ``schema_migrations`` row per change applied to it. A migration is a
numbered, named list of SQL statements that only adds (tables, columns), so rows written
by older code stay valid and ``RunStore.import_runs`` (``INSERT ... BY NAME``) still copies
an older cell file into a newer store: the columns it lacks read NULL or their default.
A migration may also rewrite rows whose meaning changed (5: the warm-start seed's
default; 6: configs in today's layout, their hashes stored); ``import_runs`` applies the
same rewrites to runs it copies from an older file (:func:`rewrite_runs`).

A run's ``config_hash`` (``mirage.core.config.run_config.config_hash``) is written when the run is
created and read, never recomputed, by sweeps. A change that alters what a stored hash
would be (a default changed, a setting moved) adds a migration whose rewrite brings the
stored configs to the new layout and stores their new hashes, as 6 does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import duckdb

from mirage.core.config import legacy as store_legacy
from mirage.core.config.run_config import config_hash


# The version-2 tables, created (IF NOT EXISTS) on every opening that writes; newer
# tables and columns come from MIGRATIONS.
BASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, status TEXT NOT NULL, config TEXT NOT NULL,
    plugins TEXT NOT NULL, git_commit TEXT, experiment TEXT, cell TEXT, seed BIGINT,
    last_step INTEGER, error TEXT, created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL, finished_at TIMESTAMP
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, value DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS groups (
    run_id TEXT NOT NULL, step INTEGER NOT NULL, prompt_index INTEGER NOT NULL,
    seed BIGINT NOT NULL, reward_mean DOUBLE, reward_variance DOUBLE, reward_std DOUBLE,
    kept BOOLEAN NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS events_seq;
CREATE TABLE IF NOT EXISTS events (
    event_id BIGINT DEFAULT nextval('events_seq'), run_id TEXT NOT NULL,
    step INTEGER NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL, "at" TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS rollouts (
    run_id TEXT NOT NULL, step INTEGER NOT NULL, prompt_index INTEGER NOT NULL,
    sample_index INTEGER NOT NULL, turn INTEGER NOT NULL, prompt TEXT NOT NULL,
    reasoning TEXT NOT NULL, action TEXT NOT NULL, reward DOUBLE NOT NULL
);
"""


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    rewrite: Callable[[duckdb.DuckDBPyConnection, list[str] | None], None] | None = None
    """Rows rewritten after the statements (a change of what stored data means), given
    the connection and the ids of the runs to rewrite (None: every run)."""


def _stored_configs(con: duckdb.DuckDBPyConnection, run_ids: list[str] | None) -> list[tuple[str, dict]]:
    where, params = ("", []) if run_ids is None else (" WHERE list_contains(?, run_id)", [run_ids])
    return [(run_id, json.loads(text))
            for run_id, text in con.execute("SELECT run_id, config FROM runs" + where, params).fetchall()]


def fill_warmstart_seeds(con: duckdb.DuckDBPyConnection, run_ids: list[str] | None = None) -> None:
    """Give every stored run config (of ``run_ids``; None: all) that leaves the warm-start
    seed unset the None it ran with (store_legacy.fill_warmstart_seed)."""
    for run_id, config in _stored_configs(con, run_ids):
        if store_legacy.fill_warmstart_seed(config):
            con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(config), run_id])


def store_hashes(con: duckdb.DuckDBPyConnection, run_ids: list[str] | None = None) -> None:
    """Bring every stored run config (of ``run_ids``; None: all) to today's layout, store
    its hash, and keep the hash it was known by as ``original_hash``; point the sweep
    cells of those runs at the new hashes."""
    for run_id, config in _stored_configs(con, run_ids):
        current = store_legacy.current_layout(config)
        con.execute("UPDATE runs SET config = ?, config_hash = ?, original_hash = ? WHERE run_id = ?",
                    [json.dumps(current, sort_keys=True), config_hash(current),
                     store_legacy.original_hash(config), run_id])
    # every file has sweep_cells from migration 4 on
    con.execute("UPDATE sweep_cells SET config_hash = runs.config_hash FROM runs"
                " WHERE sweep_cells.run_id = runs.run_id AND runs.original_hash IS NOT NULL"
                " AND sweep_cells.config_hash = runs.original_hash")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, "the rollouts table (created by the base schema)", ()),
    Migration(3, "runs: name, tags, note; pid, host, process start and heartbeat; "
                 "environment record", (
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS name TEXT",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS tags TEXT[] DEFAULT []",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS note TEXT",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS pid INTEGER",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS host TEXT",
        # the process's start time (epoch seconds): a pid reused by another process differs
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS process_started DOUBLE",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS heartbeat_at TIMESTAMP",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS environment TEXT",
    )),
    # Written and read by mirage/flows (sweep_store.py, progress.py); the DDL stays here so
    # that one version number says the shape of the whole file, whichever code opens it.
    # Before schema 4 the first sweep created these tables itself; files from then may
    # hold sweep_cells without "loaded" and no sweeps table.
    Migration(4, "sweeps: the sweeps and sweep_cells tables (owned by mirage/flows)", (
        """CREATE TABLE IF NOT EXISTS sweep_cells (
            sweep_id TEXT NOT NULL, experiment TEXT NOT NULL, cell TEXT NOT NULL, seed BIGINT,
            config_hash TEXT NOT NULL, run_id TEXT, status TEXT NOT NULL, reused BOOLEAN NOT NULL,
            loaded BOOLEAN, error TEXT, success DOUBLE, retrieval_acc DOUBLE, entropy DOUBLE,
            kept_ratio DOUBLE, recorded_at TIMESTAMP NOT NULL)""",
        "ALTER TABLE sweep_cells ADD COLUMN IF NOT EXISTS loaded BOOLEAN",
        """CREATE TABLE IF NOT EXISTS sweeps (
            sweep_id TEXT NOT NULL, experiment TEXT NOT NULL, cells INTEGER NOT NULL,
            host TEXT NOT NULL, pid INTEGER NOT NULL, state TEXT NOT NULL, message TEXT,
            started_at TIMESTAMP NOT NULL, finished_at TIMESTAMP)""",
    )),
    # The local backend's warm-start seed now defaults to 0 (one warm start for every run
    # seed); runs stored before left it unset and ran with the run seed's own warm start.
    Migration(5, "runs: stored configs name the warm-start seed they ran with (unset: None, "
                 "the run seed)", (), fill_warmstart_seeds),
    # Hashes were recomputed from stored configs on every read, in the layout of the code
    # that defined them; now each run stores its own, computed once.
    Migration(6, "runs: configs in today's layout; config_hash stored with each run, the hash "
                 "it had before kept as original_hash", (
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS config_hash TEXT",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS original_hash TEXT",
    ), store_hashes),
    # Image observations (issue 42): a turn keeps the pictures its prompt showed, as PNG
    # bytes beside its text (mirage/core/store/rollouts.py says why in the file, not beside it).
    Migration(7, "rollouts: images, the PNG pictures each stored turn's prompt showed (empty for text)", (
        "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS images BLOB[] DEFAULT []",
    )),
)
LATEST = MIGRATIONS[-1].version


def rewrite_runs(con: duckdb.DuckDBPyConnection, run_ids: list[str], found: int) -> None:
    """Apply to ``run_ids`` (copied from a file of schema ``found``) the row rewrites of
    every migration above ``found``, as that file's own migration would have."""
    for migration in MIGRATIONS:
        if migration.version > found and migration.rewrite is not None:
            migration.rewrite(con, run_ids)

_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER NOT NULL, description TEXT NOT NULL, applied_at TIMESTAMP NOT NULL
)
"""


def migrate(con: duckdb.DuckDBPyConnection, found: int | None) -> list[Migration]:
    """Apply, inside the caller's transaction, every migration above ``found`` (None: a
    new file, whose base tables were just created), record each, and set the version;
    return those applied. RuntimeError for a file newer than this code."""
    current = 1 if found is None else found  # a new file records every change
    if current > LATEST:
        raise RuntimeError(f"schema {current} is newer than {LATEST}")
    con.execute(_LEDGER)
    applied = [m for m in MIGRATIONS if m.version > current]
    for migration in applied:
        for statement in migration.statements:
            con.execute(statement)
        if migration.rewrite is not None:
            migration.rewrite(con, None)
        con.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", [
            migration.version, migration.description,
            datetime.now(timezone.utc).replace(tzinfo=None)])
    if found is None:
        con.execute("INSERT INTO schema_version VALUES (?)", [LATEST])
    else:
        con.execute("UPDATE schema_version SET version = ?", [LATEST])
    return applied

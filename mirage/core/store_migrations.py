"""The run store's schema changes, applied in order to files written by older code.

A store file records its version in ``schema_version`` (the highest row wins) and, from
version 3 on, one ``schema_migrations`` row per change applied to it. A migration is a
numbered, named list of SQL statements that only adds (tables, columns), so rows written
by older code stay valid and ``RunStore.import_runs`` (``INSERT ... BY NAME``) still copies
an older cell file into a newer store: the columns it lacks read NULL or their default.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import duckdb


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


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
)
LATEST = MIGRATIONS[-1].version

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
        con.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", [
            migration.version, migration.description,
            datetime.now(timezone.utc).replace(tzinfo=None)])
    if found is None:
        con.execute("INSERT INTO schema_version VALUES (?)", [LATEST])
    else:
        con.execute("UPDATE schema_version SET version = ?", [LATEST])
    return applied

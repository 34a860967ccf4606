"""The store's file: where it lives, how a process gets it, and its schema on opening.

DuckDB lets only one process hold a database file at a time (a writer blocks readers in
other processes and vice versa), so the store never keeps a connection open: each public
method opens a short-lived connection, does its work in one transaction and closes it.
Opening retries with a short backoff while another process holds the lock, and gives up
with ``StoreBusyError`` after ``lock_timeout`` seconds.

The writer always wins (issue 22): DuckDB's file lock has no queue, so readers that loop
(the app, a report) could take the lock between every retry of a writer and starve it.
A waiting writer therefore keeps a marker file (``<store>.writer-waiting``) fresh; a
reader does not open the file while a fresh marker exists, so the writer gets the file
as soon as the current readers' queries end. A writer also waits longer
(``WRITE_LOCK_TIMEOUT``) than any reader (``READ_LOCK_TIMEOUT``). A marker left by a
killed writer goes stale after ``MARKER_STALE_SECONDS`` and is ignored. Timestamps are stored as naive
UTC ``TIMESTAMP`` values and returned as timezone-aware UTC datetimes.

``StoreFile`` is the base of every class that reads or writes tables of the file
(``RunStore`` here, ``SweepStore`` in mirage/flows): opening one brings the file to the
current schema (mirage/core/store/migrations.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from mirage.core.store.migrations import BASE_SCHEMA, LATEST, migrate

SCHEMA_VERSION = LATEST  # the changes: mirage/core/store/migrations.py

# Within one process DuckDB shares a database instance between connections and refuses
# a read-only connection next to a read-write one, so operations are serialized here.
_PROCESS_LOCK = threading.RLock()


class StoreBusyError(TimeoutError):
    """Another process held the database file's lock for longer than ``lock_timeout``."""


READ_LOCK_TIMEOUT = 10.0
WRITE_LOCK_TIMEOUT = 60.0
MARKER_STALE_SECONDS = 2.0


def writer_marker(path: Path) -> Path:
    """The file a writer keeps fresh while it waits for ``path``'s lock."""
    return path.with_name(path.name + ".writer-waiting")


def _writer_waiting(marker: Path) -> bool:
    try:
        return time.time() - marker.stat().st_mtime < MARKER_STALE_SECONDS
    except OSError:
        return False


def connect_with_retry(path: Path, *, read_only: bool, lock_timeout: float) -> duckdb.DuckDBPyConnection:
    """Open ``path``, retrying with backoff while another process holds its lock. A
    reader first gives way to a waiting writer; a writer announces that it waits."""
    deadline = time.monotonic() + lock_timeout
    delay = 0.01
    marker = writer_marker(path)
    announced = False
    try:
        while True:
            if read_only and _writer_waiting(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            try:
                return duckdb.connect(str(path), read_only=read_only)
            except duckdb.Error as exc:
                if "Could not set lock" not in str(exc):
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreBusyError(f"{path} stayed locked for {lock_timeout:g}s: {exc}") from exc
                if not read_only:
                    marker.touch()  # (re)fresh: readers hold off while it is recent
                    announced = True
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.2)
    finally:
        if announced:
            marker.unlink(missing_ok=True)


def naive_now() -> datetime:
    """Now, as the store keeps times: naive UTC."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def naive_utc(value: datetime) -> datetime:
    """``value`` as the store keeps times (an aware datetime converted to naive UTC)."""
    return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value


def aware_utc(value: datetime | None) -> datetime | None:
    """A stored time as an aware UTC datetime (None stays None)."""
    return None if value is None else value.replace(tzinfo=timezone.utc)


def unreadable_problem(path: Path, lock_timeout: float = READ_LOCK_TIMEOUT) -> str | None:
    """Why an existing DuckDB file cannot be read as a run store by this code (it is
    damaged, or written by newer code: its schema is above ``SCHEMA_VERSION``), in one
    clause; None when it can (or when a writer holds it: the command will wait its turn)."""
    try:
        con = connect_with_retry(path, read_only=True, lock_timeout=lock_timeout)
    except StoreBusyError:
        return None
    except duckdb.Error as error:
        return f"cannot be opened as a DuckDB database ({str(error).splitlines()[0]})"
    try:
        found = StoreFile._version(con)
    except duckdb.Error as error:
        return f"cannot be read as a run store ({str(error).splitlines()[0]})"
    finally:
        con.close()
    if found is not None and found > SCHEMA_VERSION:
        return (f"was written by a newer MIRAGE (store schema {found}; this code reads up to "
                f"{SCHEMA_VERSION}): upgrade MIRAGE to read it")
    return None


class StoreFile:
    """One store file: short transactions under the writer-wins lock, schema kept current."""

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = READ_LOCK_TIMEOUT,
                 write_lock_timeout: float = WRITE_LOCK_TIMEOUT) -> None:
        """Open the store at ``path``, creating parent dirs, file and schema if missing,
        and migrating a file written by older code (RuntimeError for a newer one).

        An existing, current file is only checked read-only, so readers never write.
        Reads wait up to ``lock_timeout`` seconds for the file, writes up to
        ``write_lock_timeout`` (the larger budget: the writer wins).
        """
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self.write_lock_timeout = max(write_lock_timeout, lock_timeout)
        if self.path.exists():
            with self._tx(read_only=True) as con:
                if self._version(con) == SCHEMA_VERSION:
                    return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._tx() as con:
            found = self._version(con)
            if found is not None and found > SCHEMA_VERSION:
                raise RuntimeError(f"{self.path}: schema {found} is newer than {SCHEMA_VERSION}")
            con.execute(BASE_SCHEMA)
            migrate(con, found)

    @staticmethod
    def _version(con: duckdb.DuckDBPyConnection, database: str | None = None) -> int | None:
        """The stored schema version of ``con``'s file (or of the attached ``database``);
        None if it has no (or an empty) version table."""
        database = database or con.execute("SELECT current_database()").fetchone()[0]
        sql = ("SELECT count(*) FROM duckdb_tables() WHERE database_name = ? "
               "AND table_name = 'schema_version'")
        if not con.execute(sql, [database]).fetchone()[0]:
            return None
        return con.execute(f'SELECT max(version) FROM "{database}".schema_version').fetchone()[0]

    def _connect(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        budget = self.lock_timeout if read_only else self.write_lock_timeout
        return connect_with_retry(self.path, read_only=read_only, lock_timeout=budget)

    @contextmanager
    def _tx(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A fresh connection inside one transaction; committed on success, then closed."""
        with _PROCESS_LOCK:
            con = self._connect(read_only)
            try:
                con.begin()
                try:
                    yield con
                except BaseException:
                    con.rollback()
                    raise
                con.commit()
            finally:
                con.close()

    def _query(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        """Rows of a read-only query as dicts."""
        with self._tx(read_only=True) as con:
            cur = con.execute(sql, list(params))
            columns = [d[0] for d in cur.description]
            return [dict(zip(columns, row)) for row in cur.fetchall()]


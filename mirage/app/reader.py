"""Read-only access to the run store for the app.

DuckDB lets one process write a database file while no other process holds it, and a
reader in another process blocks the writer too. The app therefore never keeps the file
open: every query opens it read-only, runs, and closes it at once, retrying with a short
backoff while a writer (a run, a sweep loading results) holds the lock, and holding off
while a writer waits for it (the writer always wins: mirage/core/store/file.py). The app never
creates or changes the file. Queries take their values as parameters, never in the SQL text.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from mirage.core.store.file import READ_LOCK_TIMEOUT, connect_with_retry


class StoreReader:
    """Parameterised read-only queries on one DuckDB run store."""

    def __init__(self, path: str | Path, *, lock_timeout: float = READ_LOCK_TIMEOUT) -> None:
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self._tables: frozenset[str] | None = None

    def exists(self) -> bool:
        return self.path.is_file()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        return connect_with_retry(self.path, read_only=True, lock_timeout=self.lock_timeout)

    def query(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        """The rows of one read-only query; the file is open only while it runs."""
        con = self._connect()
        try:
            return con.execute(sql, list(params)).df()
        finally:
            con.close()

    def tables(self) -> frozenset[str]:
        """Names of the tables in the file (empty if there is no file)."""
        if self._tables is None:
            if not self.exists():
                return frozenset()
            names = self.query("SELECT table_name FROM duckdb_tables()")["table_name"]
            self._tables = frozenset(names)
        return self._tables

    def has_table(self, name: str) -> bool:
        return name in self.tables()

    def columns(self, table: str) -> frozenset[str]:
        """Names of the columns of ``table`` (empty if there is no such table)."""
        if not self.has_table(table):
            return frozenset()
        names = self.query("SELECT column_name FROM duckdb_columns() WHERE table_name = ?",
                           [table])["column_name"]
        return frozenset(names)

"""The run store: one DuckDB file holding every run, its metrics, prompt groups, events
and a few sampled rollouts per step (for reading what the policy writes).

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
"""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from mirage.core.store_migrations import LATEST, migrate

SCHEMA_VERSION = LATEST  # the changes: mirage/core/store_migrations.py
STATUSES = frozenset({"running", "finished", "failed", "stopped"})
TERMINAL_STATUSES = frozenset({"finished", "failed", "stopped"})
TABLES = ("runs", "metrics", "groups", "events", "rollouts")
# what `core tag/note/rename` and the heartbeat change on a run row
EDITABLE_COLUMNS = frozenset({"name", "tags", "note", "pid", "host", "process_started",
                              "heartbeat_at", "environment"})

# The version-2 tables; newer columns come from store_migrations.MIGRATIONS.
_SCHEMA = """
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
# Sweeps (mirage/flows): one row per sweep (its process, so a reader can tell a killed one)
# and one per cell, ``pending`` until the cell ends; created by the first sweep that writes here.
_SWEEP_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep_cells (
    sweep_id TEXT NOT NULL, experiment TEXT NOT NULL, cell TEXT NOT NULL, seed BIGINT,
    config_hash TEXT NOT NULL, run_id TEXT, status TEXT NOT NULL, reused BOOLEAN NOT NULL,
    loaded BOOLEAN, error TEXT, success DOUBLE, retrieval_acc DOUBLE, entropy DOUBLE, kept_ratio DOUBLE,
    recorded_at TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id TEXT NOT NULL, experiment TEXT NOT NULL, cells INTEGER NOT NULL, host TEXT NOT NULL,
    pid INTEGER NOT NULL, state TEXT NOT NULL, message TEXT, started_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP
);
"""
SWEEP_STATES = ("running", "completed", "failed")
SWEEP_CELL_FIELDS = (
    "sweep_id", "experiment", "cell", "seed", "config_hash", "run_id", "status", "reused",
    "loaded", "error", "success", "retrieval_acc", "entropy", "kept_ratio",
)
_INSERT_METRICS = "INSERT INTO metrics SELECT ?, ?, unnest(?::TEXT[]), unnest(?::DOUBLE[])"
_INSERT_GROUPS = (
    "INSERT INTO groups SELECT ?, ?, unnest(?::INTEGER[]), unnest(?::BIGINT[]),"
    " unnest(?::DOUBLE[]), unnest(?::DOUBLE[]), unnest(?::DOUBLE[]), unnest(?::BOOLEAN[])"
)
_INSERT_ROLLOUTS = (
    "INSERT INTO rollouts SELECT ?, ?, unnest(?::INTEGER[]), unnest(?::INTEGER[]),"
    " unnest(?::INTEGER[]), unnest(?::TEXT[]), unnest(?::TEXT[]), unnest(?::TEXT[]),"
    " unnest(?::DOUBLE[])"
)
_ROLLOUT_FIELDS = {
    "prompt_index": int, "sample_index": int, "turn": int, "prompt": str,
    "reasoning": str, "action": str, "reward": float,
}  # fmt: skip
_GROUP_FIELDS = {
    "prompt_index": int, "seed": int, "reward_mean": float,
    "reward_variance": float, "reward_std": float, "kept": bool,
}  # fmt: skip

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


@dataclass(frozen=True)
class GroupRow:
    """One prompt group of one training step."""

    prompt_index: int
    seed: int
    reward_mean: float
    reward_variance: float  # unbiased (divides by G - 1)
    reward_std: float  # unbiased
    kept: bool


@dataclass(frozen=True)
class RolloutRow:
    """One turn of a sampled trajectory: the prompt X it saw, its reasoning Z, its action
    (the answer text) and the turn's reward."""

    prompt_index: int
    sample_index: int
    turn: int
    prompt: str
    reasoning: str
    action: str
    reward: float


def default_db_path() -> Path:
    """The store path: ``$MIRAGE_DB`` if set, else ``./runs/mirage.duckdb``."""
    return Path(os.environ.get("MIRAGE_DB") or "runs/mirage.duckdb")


def new_run_id() -> str:
    """Sortable id: UTC timestamp + 6 random hex digits, e.g. ``20261202-111530-a1b2c3``."""
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _naive(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=timezone.utc)


def _clean_metrics(metrics: Mapping[str, float | None]) -> tuple[list[str], list[float]]:
    """Names and float values, skipping None and NaN."""
    names: list[str] = []
    values: list[float] = []
    for name, value in metrics.items():
        try:
            number = float(value) if value is not None else math.nan
        except (TypeError, ValueError) as exc:
            raise TypeError(f"metric {name!r} is not a number: {value!r}") from exc
        if not math.isnan(number):
            names.append(str(name))
            values.append(number)
    return names, values


def stored_values(metrics: Mapping[str, float | None]) -> dict[str, float]:
    """``metrics`` as the store keeps them: floats, without None and NaN."""
    return dict(zip(*_clean_metrics(metrics)))


class RunStore:
    """Runs, metrics (long format), prompt groups and events in one DuckDB file."""

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = READ_LOCK_TIMEOUT,
                 write_lock_timeout: float = WRITE_LOCK_TIMEOUT) -> None:
        """Open the store at ``path``, creating parent dirs, file and schema if missing.

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
            con.execute(_SCHEMA)
            migrate(con, found)

    @staticmethod
    def _version(con: duckdb.DuckDBPyConnection) -> int | None:
        """The stored schema version; None if the file has no (or an empty) version table."""
        sql = "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_version'"
        if not con.execute(sql).fetchone()[0]:
            return None
        return con.execute("SELECT max(version) FROM schema_version").fetchone()[0]

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

    @contextmanager
    def _write(self, run_id: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """A write transaction on an existing run (KeyError if unknown); bumps updated_at."""
        with self._tx() as con:
            if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is None:
                raise KeyError(f"unknown run_id {run_id!r}")
            yield con
            con.execute("UPDATE runs SET updated_at = ? WHERE run_id = ?", [_now(), run_id])

    def _query(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        """Rows of a read-only query as dicts."""
        with self._tx(read_only=True) as con:
            cur = con.execute(sql, list(params))
            columns = [d[0] for d in cur.description]
            return [dict(zip(columns, row)) for row in cur.fetchall()]

    def create_run(
        self,
        run_id: str,
        config: dict[str, Any],
        plugins: list[dict[str, Any]],
        git_commit: str | None,
        *,
        experiment: str | None = None,
        cell: str | None = None,
        seed: int | None = None,
        name: str | None = None,
        tags: Sequence[str] = (),
        note: str | None = None,
        environment: Mapping[str, Any] | None = None,
        process: Mapping[str, Any] | None = None,
    ) -> None:
        """Insert a new run with status ``running``; ValueError if ``run_id`` exists.

        ``config``, ``plugins`` (``[{"name", "version"}]``) and ``environment`` (the
        reproducibility record, mirage/core/run_records.py) are stored as JSON text;
        values JSON cannot encode (paths, enums) are stored as their ``str()``. ``process``
        (``pid``, ``host``, ``process_started``) names the process that runs it; its
        heartbeat starts now.
        """
        row = [json.dumps(config, sort_keys=True, default=str), json.dumps(plugins, default=str)]
        process = dict(process or {})
        record = None if environment is None else json.dumps(environment, sort_keys=True, default=str)
        now = _now()
        with self._tx() as con:
            if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
                raise ValueError(f"run_id {run_id!r} already exists")
            con.execute(
                "INSERT INTO runs (run_id, status, config, plugins, git_commit, experiment, cell,"
                " seed, created_at, updated_at, name, tags, note, environment, pid, host,"
                " process_started, heartbeat_at)"
                " VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, *row, git_commit, experiment, cell, seed, now, now, name,
                 list(dict.fromkeys(tags)), note, record, process.get("pid"), process.get("host"),
                 process.get("process_started"), now if process else None],
            )

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set labels or liveness columns of a run (``EDITABLE_COLUMNS``; KeyError for an
        unknown run, ValueError for another column)."""
        unknown = sorted(set(fields) - EDITABLE_COLUMNS)
        if unknown:
            raise ValueError(f"cannot set {', '.join(unknown)}; editable: {', '.join(sorted(EDITABLE_COLUMNS))}")
        if not fields:
            return
        values = [list(v) if k == "tags" else _naive(v) if isinstance(v, datetime)
                  else json.dumps(v, sort_keys=True, default=str) if k == "environment" else v
                  for k, v in fields.items()]
        with self._write(run_id) as con:
            con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE run_id = ?",
                        [*values, run_id])

    def heartbeat(self, run_id: str) -> None:
        """Stamp the run's ``heartbeat_at`` with now (one short write, no other change)."""
        with self._tx() as con:
            con.execute("UPDATE runs SET heartbeat_at = ? WHERE run_id = ?", [_now(), run_id])

    def delete_run(self, run_id: str) -> None:
        """Delete a run and all its rows in one transaction (KeyError if unknown). Its
        checkpoints are files: the caller removes them."""
        with self._write(run_id) as con:
            for table in TABLES:
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])

    def record_step(
        self,
        run_id: str,
        step: int,
        metrics: Mapping[str, float | None],
        groups: Sequence[GroupRow] = (),
        rollouts: Sequence[RolloutRow] = (),
    ) -> None:
        """Write one step's metrics, groups and sampled rollouts in one transaction,
        replacing rows at ``step``.

        None/NaN metric values are skipped. ``last_step`` becomes max(last_step, step).
        """
        names, values = _clean_metrics(metrics)
        with self._write(run_id) as con:
            con.execute("DELETE FROM metrics WHERE run_id = ? AND step = ?", [run_id, step])
            con.execute("DELETE FROM groups WHERE run_id = ? AND step = ?", [run_id, step])
            con.execute("DELETE FROM rollouts WHERE run_id = ? AND step = ?", [run_id, step])
            if names:
                con.execute(_INSERT_METRICS, [run_id, step, names, values])
            if groups:
                cols = [[cast(getattr(g, f)) for g in groups] for f, cast in _GROUP_FIELDS.items()]
                con.execute(_INSERT_GROUPS, [run_id, step, *cols])
            if rollouts:
                cols = [[cast(getattr(r, f)) for r in rollouts] for f, cast in _ROLLOUT_FIELDS.items()]
                con.execute(_INSERT_ROLLOUTS, [run_id, step, *cols])
            con.execute(
                "UPDATE runs SET last_step = greatest(coalesce(last_step, ?), ?) WHERE run_id = ?",
                [step, step, run_id],
            )

    def record_metrics(self, run_id: str, step: int, metrics: Mapping[str, float | None]) -> None:
        """Add metrics (e.g. validation) at ``step``, replacing same-named rows there."""
        names, values = _clean_metrics(metrics)
        with self._write(run_id) as con:
            if names:
                con.execute(
                    "DELETE FROM metrics WHERE run_id = ? AND step = ? AND list_contains(?, name)",
                    [run_id, step, names],
                )
                con.execute(_INSERT_METRICS, [run_id, step, names, values])

    def record_event(self, run_id: str, step: int, kind: str, message: str) -> None:
        """Append one event (e.g. ``checkpoint``, ``resume``, ``warning``) at ``step``."""
        with self._write(run_id) as con:
            con.execute(
                'INSERT INTO events (run_id, step, kind, message, "at") VALUES (?, ?, ?, ?, ?)',
                [run_id, step, kind, message, _now()],
            )

    def set_status(self, run_id: str, status: str, error: str | None = None) -> None:
        """Set status and error; terminal states stamp ``finished_at``, ``running`` clears it."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {sorted(STATUSES)}, got {status!r}")
        finished = _now() if status in TERMINAL_STATUSES else None
        with self._write(run_id) as con:
            con.execute(
                "UPDATE runs SET status = ?, error = ?, finished_at = ? WHERE run_id = ?",
                [status, error, finished, run_id],
            )

    def truncate_after(self, run_id: str, step: int) -> None:
        """Delete metrics, groups, events and rollouts after ``step`` (a resume point);
        last_step = step."""
        with self._write(run_id) as con:
            for table in ("metrics", "groups", "events", "rollouts"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ? AND step > ?", [run_id, step])
            con.execute("UPDATE runs SET last_step = ? WHERE run_id = ?", [step, run_id])

    def resume_run(self, run_id: str, step: int, message: str,
                   config: dict[str, Any] | None = None,
                   process: Mapping[str, Any] | None = None) -> None:
        """Reopen a run at ``step`` (its checkpoint) in ONE transaction: delete its rows
        after ``step``, set last_step = step, status ``running`` (error and finished_at
        cleared), add a ``resumed`` event, record the ``process`` that continues it (as
        ``create_run`` does) and, to extend its steps, store ``config``.
        A kill at any moment leaves either the old run or the reopened one."""
        with self._write(run_id) as con:
            for table in ("metrics", "groups", "events", "rollouts"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ? AND step > ?", [run_id, step])
            con.execute("UPDATE runs SET last_step = ?, status = 'running', error = NULL,"
                        " finished_at = NULL WHERE run_id = ?", [step, run_id])
            if process is not None:
                con.execute("UPDATE runs SET pid = ?, host = ?, process_started = ?, heartbeat_at = ?"
                            " WHERE run_id = ?", [process["pid"], process["host"],
                                                  process["process_started"], _now(), run_id])
            if config is not None:
                con.execute("UPDATE runs SET config = ? WHERE run_id = ?",
                            [json.dumps(config, sort_keys=True, default=str), run_id])
            con.execute('INSERT INTO events (run_id, step, kind, message, "at") VALUES (?, ?, ?, ?, ?)',
                        [run_id, step, "resumed", message, _now()])

    def _runs(self, where: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        runs = self._query(f"SELECT * FROM runs {where} ORDER BY created_at, run_id", params)
        for run in runs:
            run["config"], run["plugins"] = json.loads(run["config"]), json.loads(run["plugins"])
            run["environment"] = json.loads(run["environment"]) if run["environment"] else {}
            run["tags"] = list(run["tags"] or [])
            for key in ("created_at", "updated_at", "finished_at", "heartbeat_at"):
                run[key] = _utc(run[key])
        return runs

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run row as a dict (config/plugins/environment parsed, tags a list, UTC
        datetimes), or None. Its ``status`` is the stored one; ``mirage.core.heartbeat.
        effective_status`` tells whether a ``running`` run's process is still alive."""
        runs = self._runs("WHERE run_id = ?", [run_id])
        return runs[0] if runs else None

    def list_runs(self) -> list[dict[str, Any]]:
        """All runs, oldest first, in the same form as ``get_run``."""
        return self._runs("", [])

    def finished_run(self, config: Mapping[str, Any]) -> str | None:
        """The id of a finished run whose stored config equals ``config``, or None
        (lets a benchmark or a sweep reuse work already done)."""
        for row in self.list_runs():
            if row["status"] == "finished" and row["config"] == config:
                return row["run_id"]
        return None

    def import_runs(self, source: str | os.PathLike[str], *, experiment: str | None = None) -> list[str]:
        """Copy every run of another store file (a sweep cell's own DuckDB file) that is
        not here yet, with all its rows, in one transaction; return the copied run ids.
        With ``experiment``, only that experiment's finished runs.

        This is how sweeps load results: cells write their own files and one process
        (the only writer of this file) imports them, so no cell ever opens this file."""
        with self._tx() as con:
            con.execute("ATTACH ? AS cell (READ_ONLY)", [str(source)])
            try:
                chosen = ("" if experiment is None
                          else " WHERE experiment = $experiment AND status = 'finished'")
                have = {r[0] for r in con.execute(
                    "SELECT run_id FROM cell.runs" + chosen,
                    {} if experiment is None else {"experiment": experiment}).fetchall()}
                here = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
                new = sorted(have - here)
                present = {r[0] for r in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = 'cell'").fetchall()}
                for table in (t for t in TABLES if t in present and new):
                    columns = "* EXCLUDE (event_id)" if table == "events" else "*"
                    con.execute(f"INSERT INTO {table} BY NAME SELECT {columns} FROM cell.{table}"
                                " WHERE list_contains(?, run_id)", [new])
            finally:
                con.execute("DETACH cell")
        return new

    def final_metrics(self, run_id: str, names: Sequence[str]) -> dict[str, float]:
        """Each named metric's value at the last step that recorded it (absent: missing)."""
        rows = self._query(
            "SELECT name, arg_max(value, step) AS value FROM metrics WHERE run_id = ?"
            " AND list_contains(?, name) GROUP BY name", [run_id, list(names)],
        )
        return {r["name"]: r["value"] for r in rows}

    @staticmethod
    def _insert_sweep_cells(con: duckdb.DuckDBPyConnection, rows: Sequence[Mapping[str, Any]]) -> None:
        con.execute(_SWEEP_SCHEMA)
        # Stores from before the "loaded" column (a cell only imported from an
        # interrupted sweep's files) gain it; their old rows read NULL.
        con.execute("ALTER TABLE sweep_cells ADD COLUMN IF NOT EXISTS loaded BOOLEAN")
        now = _now()
        for row in rows:
            con.execute(
                f"INSERT INTO sweep_cells ({', '.join(SWEEP_CELL_FIELDS)}, recorded_at)"
                f" VALUES ({', '.join('?' * (len(SWEEP_CELL_FIELDS) + 1))})",
                [row.get(k) for k in SWEEP_CELL_FIELDS] + [now],
            )

    def record_sweep_cells(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append one summary row per sweep cell (keys: ``SWEEP_CELL_FIELDS``)."""
        with self._tx() as con:
            self._insert_sweep_cells(con, rows)

    def start_sweep(self, sweep_id: str, experiment: str, rows: Sequence[Mapping[str, Any]],
                    *, host: str, pid: int) -> None:
        """Record a sweep as ``running`` in process ``pid`` on ``host``, with one row per
        cell (``status`` ``pending`` for a cell still to run), in one transaction."""
        with self._tx() as con:
            self._insert_sweep_cells(con, rows)
            con.execute("INSERT INTO sweeps (sweep_id, experiment, cells, host, pid, state,"
                        " started_at) VALUES (?, ?, ?, ?, ?, 'running', ?)",
                        [sweep_id, experiment, len(rows), host, pid, _now()])

    def update_sweep_cell(self, sweep_id: str, row: Mapping[str, Any]) -> None:
        """Replace the summary values of one cell of a sweep (found by its config hash)
        once it has ended."""
        changed = [k for k in SWEEP_CELL_FIELDS if k not in ("sweep_id", "config_hash")]
        with self._tx() as con:
            con.execute(f"UPDATE sweep_cells SET {', '.join(f'{k} = ?' for k in changed)}"
                        " WHERE sweep_id = ? AND config_hash = ?",
                        [row.get(k) for k in changed] + [sweep_id, row["config_hash"]])

    def finish_sweep(self, sweep_id: str, state: str, message: str) -> None:
        """Set a sweep's final ``state`` (completed or failed) and its one-line message."""
        if state not in SWEEP_STATES[1:]:
            raise ValueError(f"a sweep ends completed or failed, got {state!r}")
        with self._tx() as con:
            con.execute("UPDATE sweeps SET state = ?, message = ?, finished_at = ? WHERE sweep_id = ?",
                        [state, message, _now(), sweep_id])

    def sweep_cells(self, sweep_id: str | None = None) -> list[dict[str, Any]]:
        """Summary rows of one sweep (or of all), in the order they were recorded."""
        with self._tx(read_only=True) as con:
            sql = "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'sweep_cells'"
            if not con.execute(sql).fetchone()[0]:
                return []
        where, params = ("", []) if sweep_id is None else ("WHERE sweep_id = ?", [sweep_id])
        return self._query(f"SELECT * FROM sweep_cells {where} ORDER BY recorded_at, rowid", params)

    def metrics(self, run_id: str, name: str | None = None) -> list[tuple[int, str, float]]:
        """``(step, name, value)`` rows of a run (optionally one metric), by step then name."""
        where, params = ("", [run_id]) if name is None else (" AND name = ?", [run_id, name])
        rows = self._query(
            f"SELECT step, name, value FROM metrics WHERE run_id = ?{where} ORDER BY step, name",
            params,
        )
        return [(r["step"], r["name"], r["value"]) for r in rows]

    def groups(self, run_id: str, step: int | None = None) -> list[dict[str, Any]]:
        """Group rows as dicts (``step`` + GroupRow fields), by step then prompt_index."""
        where, params = ("", [run_id]) if step is None else (" AND step = ?", [run_id, step])
        return self._query(
            f"SELECT step, {', '.join(_GROUP_FIELDS)} FROM groups WHERE run_id = ?{where}"
            " ORDER BY step, prompt_index",
            params,
        )

    def rollouts(self, run_id: str, step: int | None = None) -> list[dict[str, Any]]:
        """Sampled rollout rows as dicts (``step`` + RolloutRow fields), by step, sample,
        prompt and turn."""
        where, params = ("", [run_id]) if step is None else (" AND step = ?", [run_id, step])
        return self._query(
            f"SELECT step, {', '.join(_ROLLOUT_FIELDS)} FROM rollouts WHERE run_id = ?{where}"
            " ORDER BY step, sample_index, prompt_index, turn",
            params,
        )

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """Events as ``{step, kind, message, at}`` dicts, by step then insertion order."""
        rows = self._query(
            'SELECT step, kind, message, "at" FROM events WHERE run_id = ? ORDER BY step, event_id',
            [run_id],
        )
        return [{**r, "at": _utc(r["at"])} for r in rows]

    def snapshot(self) -> dict[str, int]:
        """Row counts per table, e.g. to check that an operation wrote nothing."""
        sql = " UNION ALL ".join(f"SELECT '{t}' AS t, count(*) AS n FROM {t}" for t in TABLES)
        return {r["t"]: r["n"] for r in self._query(sql, [])}

"""The run store: one DuckDB file holding every run, its metrics, prompt groups, events
and a few sampled rollouts per step (mirage/core/store/rollouts.py).

The file's mechanics (short transactions, the writer-wins lock, the schema brought up to
date on opening) are ``StoreFile``'s (mirage/core/store/file.py); a sweep's tables in the
same file are ``SweepStore``'s (mirage/flows/sweep_store.py).
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from mirage.core.config.run_config import config_hash as hash_of
from mirage.core.store.file import StoreFile, aware_utc, naive_now, naive_utc
from mirage.core.store.migrations import rewrite_runs
from mirage.core.store.rollouts import RolloutRow, replace_rollouts, rollouts_query

STATUSES = frozenset({"running", "finished", "failed", "stopped"})
TERMINAL_STATUSES = frozenset({"finished", "failed", "stopped"})
TABLES = ("runs", "metrics", "groups", "events", "rollouts")
# what `core tag/note/rename` and the heartbeat change on a run row
EDITABLE_COLUMNS = frozenset({"name", "tags", "note", "pid", "host", "process_started",
                              "heartbeat_at", "environment"})

_INSERT_METRICS = "INSERT INTO metrics SELECT ?, ?, unnest(?::TEXT[]), unnest(?::DOUBLE[])"
_INSERT_GROUPS = (
    "INSERT INTO groups SELECT ?, ?, unnest(?::INTEGER[]), unnest(?::BIGINT[]),"
    " unnest(?::DOUBLE[]), unnest(?::DOUBLE[]), unnest(?::DOUBLE[]), unnest(?::BOOLEAN[])"
)
_GROUP_FIELDS = {
    "prompt_index": int, "seed": int, "reward_mean": float,
    "reward_variance": float, "reward_std": float, "kept": bool,
}  # fmt: skip


@dataclass(frozen=True)
class GroupRow:
    """One prompt group of one training step."""

    prompt_index: int
    seed: int
    reward_mean: float
    reward_variance: float  # unbiased (divides by G - 1)
    reward_std: float  # unbiased
    kept: bool


def default_db_path() -> Path:
    """The store path: ``$MIRAGE_DB`` if set, else ``./runs/mirage.duckdb``."""
    return Path(os.environ.get("MIRAGE_DB") or "runs/mirage.duckdb")


def new_run_id() -> str:
    """Sortable id: UTC timestamp + 6 random hex digits, e.g. ``20261202-111530-a1b2c3``."""
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


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


class RunStore(StoreFile):
    """Runs, metrics (long format), prompt groups, events and sampled rollouts."""

    @contextmanager
    def _write(self, run_id: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """A write transaction on an existing run (KeyError if unknown); bumps updated_at."""
        with self._tx() as con:
            if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is None:
                raise KeyError(f"unknown run_id {run_id!r}")
            yield con
            con.execute("UPDATE runs SET updated_at = ? WHERE run_id = ?", [naive_now(), run_id])

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
        config_hash: str | None = None,
    ) -> None:
        """Insert a new run with status ``running``; ValueError if ``run_id`` exists.

        Its ``config_hash`` (sweeps reuse finished runs by it) is stored once, here:
        ``RunConfig.run_hash()`` of the resolved config, or computed from ``config``
        (``resume_run`` stores the new one of an extended run).

        ``config``, ``plugins`` (``[{"name", "version"}]``) and ``environment`` (the
        reproducibility record, mirage/core/run/records.py) are stored as JSON text;
        values JSON cannot encode (paths, enums) are stored as their ``str()``. ``process``
        (``pid``, ``host``, ``process_started``) names the process that runs it; its
        heartbeat starts now.
        """
        row = [json.dumps(config, sort_keys=True, default=str), json.dumps(plugins, default=str)]
        process = dict(process or {})
        record = None if environment is None else json.dumps(environment, sort_keys=True, default=str)
        now = naive_now()
        with self._tx() as con:
            if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
                raise ValueError(f"run_id {run_id!r} already exists")
            con.execute(
                "INSERT INTO runs (run_id, status, config, config_hash, plugins, git_commit,"
                " experiment, cell, seed, created_at, updated_at, name, tags, note, environment,"
                " pid, host, process_started, heartbeat_at)"
                " VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, row[0], config_hash or hash_of(json.loads(row[0])), row[1], git_commit,
                 experiment, cell, seed, now, now, name,
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
        values = [list(v) if k == "tags" else naive_utc(v) if isinstance(v, datetime)
                  else json.dumps(v, sort_keys=True, default=str) if k == "environment" else v
                  for k, v in fields.items()]
        with self._write(run_id) as con:
            con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE run_id = ?",
                        [*values, run_id])

    def heartbeat(self, run_id: str) -> None:
        """Stamp the run's ``heartbeat_at`` with now (one short write, no other change)."""
        with self._tx() as con:
            con.execute("UPDATE runs SET heartbeat_at = ? WHERE run_id = ?", [naive_now(), run_id])

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
            if names:
                con.execute(_INSERT_METRICS, [run_id, step, names, values])
            if groups:
                cols = [[cast(getattr(g, f)) for g in groups] for f, cast in _GROUP_FIELDS.items()]
                con.execute(_INSERT_GROUPS, [run_id, step, *cols])
            replace_rollouts(con, run_id, step, rollouts)
            con.execute(
                "UPDATE runs SET last_step = greatest(coalesce(last_step, ?), ?) WHERE run_id = ?",
                [step, step, run_id],
            )

    def record_event(self, run_id: str, step: int, kind: str, message: str) -> None:
        """Append one event (e.g. ``checkpoint``, ``resume``, ``warning``) at ``step``."""
        with self._write(run_id) as con:
            con.execute(
                'INSERT INTO events (run_id, step, kind, message, "at") VALUES (?, ?, ?, ?, ?)',
                [run_id, step, kind, message, naive_now()],
            )

    def set_status(self, run_id: str, status: str, error: str | None = None) -> None:
        """Set status and error; terminal states stamp ``finished_at``, ``running`` clears it."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {sorted(STATUSES)}, got {status!r}")
        finished = naive_now() if status in TERMINAL_STATUSES else None
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
                                                  process["process_started"], naive_now(), run_id])
            if config is not None:  # extended: another config, another hash
                text = json.dumps(config, sort_keys=True, default=str)
                con.execute("UPDATE runs SET config = ?, config_hash = ? WHERE run_id = ?",
                            [text, hash_of(json.loads(text)), run_id])
            con.execute('INSERT INTO events (run_id, step, kind, message, "at") VALUES (?, ?, ?, ?, ?)',
                        [run_id, step, "resumed", message, naive_now()])

    def _runs(self, where: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        runs = self._query(f"SELECT * FROM runs {where} ORDER BY created_at, run_id", params)
        for run in runs:
            run["config"], run["plugins"] = json.loads(run["config"]), json.loads(run["plugins"])
            run["environment"] = json.loads(run["environment"]) if run["environment"] else {}
            run["tags"] = list(run["tags"] or [])
            for key in ("created_at", "updated_at", "finished_at", "heartbeat_at"):
                run[key] = aware_utc(run[key])
        return runs

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run row as a dict (config/plugins/environment parsed, tags a list, UTC
        datetimes), or None. Its ``status`` is the stored one; ``mirage.core.store.heartbeat.
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
        With ``experiment``, only that experiment's finished runs and the runs that stopped
        themselves (status ``stopped`` with a ``stopped`` event: a stop rule fired, e.g. the
        filter kept nothing too long), which are outcomes of a study; an interrupted run
        (status ``stopped``, no such event) is not one.

        This is how sweeps load results: cells write their own files and one process
        (the only writer of this file) imports them, so no cell ever opens this file."""
        with self._tx() as con:
            con.execute("ATTACH ? AS cell (READ_ONLY)", [str(source)])
            try:
                chosen = ("" if experiment is None else
                          " WHERE experiment = $experiment AND (status = 'finished' OR (status = "
                          "'stopped' AND run_id IN (SELECT run_id FROM cell.events WHERE kind = 'stopped')))")
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
                if new:  # what the file's own migrations would do to its runs
                    rewrite_runs(con, new, self._version(con, "cell") or 1)
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
        return self._query(*rollouts_query(run_id, step))

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """Events as ``{step, kind, message, at}`` dicts, by step then insertion order."""
        rows = self._query(
            'SELECT step, kind, message, "at" FROM events WHERE run_id = ? ORDER BY step, event_id',
            [run_id],
        )
        return [{**r, "at": aware_utc(r["at"])} for r in rows]

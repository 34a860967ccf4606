"""A sweep's progress while it runs, read without writing anything: for ``core sweeps``
and the app's Sweeps tab.

The sweep's flow process is the main store's only writer: it records the sweep (its
host and pid) and one ``pending`` row per cell when it starts, and replaces a cell's row
when the cell ends and is loaded. A pending cell that has started has its own DuckDB
file (``cells/<config hash>/cell.duckdb``) with its run's ``last_step``; it is read here
read-only, one query on a connection opened and closed at once, through the same
writer-wins protocol as every reader (mirage/core/store/file.py): a reader gives way to a
waiting writer and waits at most ``CELL_READ_TIMEOUT`` for a cell, so it never holds up
a running cell for longer than one short query. A cell busy for longer reads as
``running`` without a step. Imports nothing from Prefect.
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from mirage.core.store.file import READ_LOCK_TIMEOUT, StoreBusyError, connect_with_retry
from mirage.flows.cells import CELL_DB, cell_root, read_outcome

CELL_READ_TIMEOUT = 1.0
# Cell statuses in the order a progress line counts them.
CELL_STATUSES = ("finished", "failed", "stopped", "running", "pending")


@dataclass(frozen=True)
class SweepProgress:
    """One sweep as the store and its cells' files show it now. ``state``: running,
    completed, failed, or interrupted (its process on this host is gone)."""

    sweep_id: str
    experiment: str
    state: str
    message: str | None
    started_at: datetime | None
    cells: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = Counter(cell["status"] for cell in self.cells)
        return {status: found[status] for status in CELL_STATUSES}

    def headline(self) -> str:
        """e.g. ``stochasticity (sweep 0f3a...): running, 16 cells: 5 finished, 1 failed,
        0 stopped, 2 running, 8 pending``."""
        counts = ", ".join(f"{n} {status}" for status, n in self.counts().items())
        return f"{self.experiment} (sweep {self.sweep_id}): {self.state}, {len(self.cells)} cells: {counts}"


def _process_alive(host: str, pid: int) -> bool:
    """Whether the sweep's process still runs; only this host's processes can be seen,
    so a sweep on another host counts as alive."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cursor = con.execute(sql, params)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def _cell_run(path: Path) -> dict[str, Any] | None:
    """The running cell's run (status, last_step, steps) from its own file; None while
    the file is being created or the cell's writer holds it too long."""
    try:
        con = connect_with_retry(path, read_only=True, lock_timeout=CELL_READ_TIMEOUT)
    except (StoreBusyError, duckdb.Error, OSError):
        return None
    try:
        found = _rows(con, "SELECT status, last_step, json_extract(config, '$.steps')::INTEGER"
                           " AS steps FROM runs ORDER BY created_at DESC LIMIT 1", [])
    except duckdb.Error:  # its schema is not written yet
        return None
    finally:
        con.close()
    return found[0] if found else None


def live_cell(db: Path, cell: dict[str, Any], *, alive: bool) -> dict[str, Any]:
    """A cell row with ``step``/``steps`` and, for a cell the store still has as
    pending, its status from its own files: ``pending`` (not started, or its sweep is
    gone), ``running`` (with its last step), or how it ended while the sweep has not
    loaded it yet."""
    cell = {**cell, "step": None, "steps": None}
    if cell["status"] != "pending":
        return cell
    directory = cell_root(db) / cell["config_hash"]
    outcome = read_outcome(directory)
    if outcome is not None:
        return cell | {"status": outcome["status"], "error": outcome.get("error")}
    if not alive or not (directory / CELL_DB).exists():
        return cell
    run = _cell_run(directory / CELL_DB) or {}
    return cell | {"status": "running", "step": run.get("last_step"), "steps": run.get("steps")}


def read_sweeps(db: str | Path, *, last: int | None = None,
                lock_timeout: float = READ_LOCK_TIMEOUT) -> list[SweepProgress]:
    """The store's sweeps, newest first (at most ``last``), each with its cells; an
    unfinished sweep's pending cells are read from their own files. A sweep recorded
    before the ``sweeps`` table existed is rebuilt from its ``sweep_cells`` rows."""
    db = Path(db)
    con = connect_with_retry(db, read_only=True, lock_timeout=lock_timeout)
    try:
        tables = {r["table_name"] for r in _rows(con, "SELECT table_name FROM duckdb_tables()", [])}
        if "sweep_cells" not in tables:
            return []
        cells = _rows(con, "SELECT * FROM sweep_cells ORDER BY recorded_at, rowid", [])
        sweeps = _rows(con, "SELECT * FROM sweeps", []) if "sweeps" in tables else []
    finally:
        con.close()
    by_sweep: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        by_sweep.setdefault(cell["sweep_id"], []).append(cell)
    recorded = {s["sweep_id"]: s for s in sweeps}
    for sweep_id, rows in by_sweep.items():  # sweeps from before the sweeps table
        if sweep_id not in recorded:
            failed = any(r["status"] == "failed" for r in rows)
            recorded[sweep_id] = {"sweep_id": sweep_id, "experiment": rows[0]["experiment"],
                                  "state": "failed" if failed else "completed", "message": None,
                                  "started_at": rows[0]["recorded_at"], "host": "", "pid": 0}
    ordered = sorted(recorded.values(), key=lambda s: s["started_at"], reverse=True)[:last]
    found = []
    for sweep in ordered:
        state = sweep["state"]
        alive = state == "running" and _process_alive(sweep["host"], sweep["pid"])
        if state == "running" and not alive:
            state = "interrupted"
        found.append(SweepProgress(
            sweep["sweep_id"], sweep["experiment"], state, sweep["message"], sweep["started_at"],
            [live_cell(db, cell, alive=alive) for cell in by_sweep.get(sweep["sweep_id"], [])]))
    return found


def cell_line(cell: dict[str, Any]) -> str:
    """One cell for ``core sweeps``: ``CELL seed=N: STATUS`` with its step while it runs,
    its one-line reason when it failed, its final success when it has one."""
    from mirage.flows.summary import reason

    line = f"{cell['cell']} seed={cell['seed']}: {cell['status']}"
    if cell["status"] == "running" and cell.get("step") is not None:
        line += f", step {cell['step']}" + (f"/{cell['steps']}" if cell.get("steps") is not None else "")
    elif cell["status"] == "failed":
        line += f" ({reason(cell.get('error'))})"
    elif cell.get("success") is not None:
        line += f", success {cell['success']:.3f}"
    return line

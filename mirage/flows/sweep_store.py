"""A sweep's rows in the main store: one per sweep (its process, so a reader can tell a
killed one) in ``sweeps`` and one per cell in ``sweep_cells``, ``pending`` until the cell
ends. The sweep flow (mirage/flows/sweep.py) is their only writer; progress.py and the
app's sweep views read them. The tables' DDL is schema 4 of the store file
(mirage/core/store/migrations.py): one ordered history for the whole file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mirage.core.store.file import StoreFile, naive_now

SWEEP_STATES = ("running", "completed", "failed")
SWEEP_CELL_FIELDS = (
    "sweep_id", "experiment", "cell", "seed", "config_hash", "run_id", "status", "reused",
    "loaded", "error", "success", "retrieval_acc", "entropy", "kept_ratio",
)


class SweepStore(StoreFile):
    """The ``sweeps`` and ``sweep_cells`` tables of a store file."""

    def start_sweep(self, sweep_id: str, experiment: str, rows: Sequence[Mapping[str, Any]],
                    *, host: str, pid: int) -> None:
        """Record a sweep as ``running`` in process ``pid`` on ``host``, with one row per
        cell (keys: ``SWEEP_CELL_FIELDS``; ``status`` ``pending`` for a cell still to run),
        in one transaction."""
        recorded = naive_now()
        with self._tx() as con:
            for row in rows:
                con.execute(
                    f"INSERT INTO sweep_cells ({', '.join(SWEEP_CELL_FIELDS)}, recorded_at)"
                    f" VALUES ({', '.join('?' * (len(SWEEP_CELL_FIELDS) + 1))})",
                    [row.get(k) for k in SWEEP_CELL_FIELDS] + [recorded],
                )
            con.execute("INSERT INTO sweeps (sweep_id, experiment, cells, host, pid, state,"
                        " started_at) VALUES (?, ?, ?, ?, ?, 'running', ?)",
                        [sweep_id, experiment, len(rows), host, pid, recorded])

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
                        [state, message, naive_now(), sweep_id])

    def sweep_cells(self, sweep_id: str | None = None) -> list[dict[str, Any]]:
        """Summary rows of one sweep (or of all), in the order they were recorded."""
        where, params = ("", []) if sweep_id is None else ("WHERE sweep_id = ?", [sweep_id])
        return self._query(f"SELECT * FROM sweep_cells {where} ORDER BY recorded_at, rowid", params)

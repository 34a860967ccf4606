"""The load step: bring finished cells into the main store, the file's only writer.

Cells write their own DuckDB files (mirage/flows/task.py); this step, run once by the
sweep flow after the cells, imports each with short transactions, records a failed run
for a cell that failed before its run started, and reads back each cell's final metrics
for the summary. Readers (the app) wait at most one short transaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mirage.core.run.records import git_commit
from mirage.core.store.labels import PROBE_TAG
from mirage.core.store.run_store import RunStore, new_run_id
from mirage.flows.cells import CELL_DB, CellSpec, cell_dir, read_outcome
from mirage.flows.summary import SUMMARY_METRICS

REUSABLE = ("finished", "stopped")


def completed_runs(store: RunStore) -> dict[str, str]:
    """config hash (as stored with each run) -> id of a finished (or stopped) run, the
    latest per hash: the cache. A stored probe (tagged PROBE_TAG) trained nothing and is
    never a cell's result."""
    return {row["config_hash"]: row["run_id"] for row in store.list_runs()
            if row["status"] in REUSABLE and PROBE_TAG not in (row.get("tags") or [])}


def ran_before(root: Path, spec: CellSpec) -> bool:
    """Whether the cell's directory holds a finished (or stopped) run of exactly this
    config, left by an earlier sweep whose load step never ran: the outcome records the
    hash it ran under (an outcome written before it did is run again)."""
    outcome = read_outcome(cell_dir(root, spec)) or {}
    return outcome.get("status") in REUSABLE and outcome.get("config_hash") == spec.config_hash


def load_cell(store: RunStore, spec: CellSpec, root: Path, *, loaded: bool = False) -> dict[str, Any]:
    """Import one cell; return its summary row (without ``sweep_id``). ``loaded``: the
    cell ran in an earlier, interrupted sweep and this one only imports its files."""
    directory = cell_dir(root, spec)
    outcome = read_outcome(directory) or {
        "status": "failed", "run_id": None, "error": "the cell ended without recording an outcome",
    }
    imported = store.import_runs(directory / CELL_DB) if (directory / CELL_DB).exists() else []
    run_id = outcome["run_id"] or (imported[-1] if imported else None)
    if run_id is None:  # failed before its run existed (e.g. loading the model): record it
        run_id = new_run_id()
        store.create_run(run_id, spec.config, [], git_commit(), experiment=spec.experiment,
                         cell=spec.cell, seed=spec.seed, config_hash=spec.config_hash)
        store.set_status(run_id, "failed", outcome["error"])
    return _row(store, spec, run_id, outcome["status"], outcome["error"], reused=False) | {"loaded": loaded}


def pending_cell(spec: CellSpec) -> dict[str, Any]:
    """The summary row of a cell still to run (``status`` ``pending``) until it ends."""
    return {"experiment": spec.experiment, "cell": spec.cell, "seed": spec.seed,
            "config_hash": spec.config_hash, "run_id": None, "status": "pending",
            "reused": False, "loaded": False, "error": None,
            **{column: None for column in SUMMARY_METRICS}}


def reused_cell(store: RunStore, spec: CellSpec, run_id: str) -> dict[str, Any]:
    """The summary row of a cell whose config already ran to completion."""
    status = (store.get_run(run_id) or {}).get("status", "finished")
    return _row(store, spec, run_id, status, None, reused=True)


def _row(store: RunStore, spec: CellSpec, run_id: str, status: str, error: str | None,
         reused: bool) -> dict[str, Any]:
    final = store.final_metrics(run_id, list(SUMMARY_METRICS.values()))
    return {
        "experiment": spec.experiment, "cell": spec.cell, "seed": spec.seed,
        "config_hash": spec.config_hash, "run_id": run_id, "status": status,
        "reused": reused, "loaded": False, "error": error,
        **{column: final.get(metric) for column, metric in SUMMARY_METRICS.items()},
    }

"""Sweep progress: the store's sweeps (a running one first) with each cell's status, its
step while it runs, its final success or its failure's reason. A running sweep's
finished cells are already in the store (the sweep loads each as it ends); its running
cells are read from their own files (mirage/flows/progress.py, read-only, never holding
up a cell's writer)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from mirage.app.picker import Selection
from mirage.app.reader import StoreReader
from mirage.flows.progress import SweepProgress, read_sweeps
from mirage.flows.summary import reason

ENDED = ("finished", "failed", "stopped")


def _cells(sweep: SweepProgress) -> pd.DataFrame:
    rows = []
    for cell in sweep.cells:
        step = "" if cell.get("step") is None else str(cell["step"])
        if step and cell.get("steps") is not None:
            step += f"/{cell['steps']}"
        rows.append({"cell": cell["cell"], "seed": cell["seed"], "status": cell["status"],
                     "step": step, "success": cell.get("success"),
                     "error": reason(cell["error"]) if cell.get("error") else "",
                     "run_id": cell.get("run_id") or ""})
    return pd.DataFrame(rows, columns=["cell", "seed", "status", "step", "success", "error", "run_id"])


def progress_panel(reader: StoreReader) -> None:
    """A chosen sweep's progress bar and cell table (the newest running sweep by default)."""
    st.subheader("Sweep progress")
    found = read_sweeps(reader.path, lock_timeout=reader.lock_timeout)
    if not found:
        st.caption("No sweep has written to this store yet (`core sweep NAME` or "
                   "`prefect deployment run sweep/NAME`).")
        return
    running = [i for i, sweep in enumerate(found) if sweep.state == "running"]
    labels = {s.sweep_id: f"{s.experiment}: {s.state} (sweep {s.sweep_id})" for s in found}
    chosen = st.selectbox("sweep", list(labels), format_func=labels.get,
                          index=running[0] if running else 0, key="sweep_progress")
    sweep = next(s for s in found if s.sweep_id == chosen)
    ended = sum(sweep.counts()[status] for status in ENDED)
    st.progress(ended / max(len(sweep.cells), 1), text=sweep.headline())
    if sweep.state == "interrupted":
        st.warning("This sweep's process is gone: run the same sweep again to load the cells "
                   "that finished and rerun the rest.")
    elif sweep.message:
        st.caption(sweep.message)
    st.dataframe(_cells(sweep), hide_index=True)


def sweep_progress(sel: Selection) -> None:
    progress_panel(sel.reader)


def any_running(reader: StoreReader) -> bool:
    """Whether the store records a sweep that has not ended (so the page re-reads)."""
    if not reader.has_table("sweeps"):
        return False
    frame = reader.query("SELECT count(*) AS n FROM sweeps WHERE state = 'running'")
    return bool(frame["n"].iloc[0])

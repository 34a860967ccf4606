"""The per-cell summary table a sweep stores (``sweep_cells``) and prints."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

# Summary column -> the metric whose final value it shows (docs/metrics.md).
SUMMARY_METRICS = {
    "success": "val/success",
    "retrieval_acc": "mi/first_turn/retrieval_acc",
    "entropy": "update/entropy",
    "kept_ratio": "filter/kept_ratio",
}

_COLUMNS = ("cell", "seed", "status", "success", "retrieval_acc", "entropy", "kept_ratio", "run_id")


def _show(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    """A fixed-width text table, one line per cell, then a line per failed cell's error."""
    cells = [[_show(row.get(c)) + (_origin(row) if c == "status" else "") for c in _COLUMNS]
             for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(_COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(_COLUMNS, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    lines += [f"failed: {row['cell']} seed {row['seed']}: {row['error']}"
              for row in rows if row.get("status") == "failed"]
    return "\n".join(lines)


def _origin(row: Mapping[str, Any]) -> str:
    if row.get("reused"):
        return " (reused)"
    return " (loaded)" if row.get("loaded") else ""


# How much of a cell's error the one-line verdict and progress lines carry.
REASON_CHARS = 300


def reason(error: str | None) -> str:
    """A cell's error as one line: its first line, cut at REASON_CHARS characters."""
    lines = (error or "").strip().splitlines()
    line = lines[0] if lines else "no error recorded"
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def first_failure(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """``CELL seed=N: REASON`` of the first failed cell (None if none failed), so the
    flow's final state message, which Prefect prints, says why."""
    for row in rows:
        if row["status"] == "failed":
            return f"{row['cell']} seed={row['seed']}: {reason(row.get('error'))}"
    return None


def progress_line(row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """One line when a cell ends: the cell, its status (a failure's reason), then the
    sweep's counts so far, e.g. ``[3/16] slip=0.5 seed=0: failed (OSError: ...);
    1 finished, 1 failed, 0 stopped, 13 pending``."""
    statuses = [r["status"] for r in rows]
    ended = len(statuses) - statuses.count("pending")
    said = f"failed ({reason(row.get('error'))})" if row["status"] == "failed" else row["status"]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in ("finished", "failed", "stopped", "pending"))
    return f"[{ended}/{len(rows)}] {row['cell']} seed={row['seed']}: {said}; {counts}"


def verdict(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line for the flow's final state, e.g. ``16 cells: 12 run, 2 loaded, 1 reused,
    1 failed``: run in this sweep, loaded from the files an interrupted sweep left,
    reused from runs already in the store, failed (of those run or loaded)."""
    failed = sum(r["status"] == "failed" for r in rows)
    reused = sum(bool(r["reused"]) for r in rows)
    loaded = sum(bool(r.get("loaded")) and r["status"] != "failed" for r in rows)
    ran = len(rows) - reused - loaded - failed
    return f"{len(rows)} cells: {ran} run, {loaded} loaded, {reused} reused, {failed} failed"

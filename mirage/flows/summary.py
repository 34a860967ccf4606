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


def verdict(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line for the flow's final state, e.g. ``16 cells: 12 run, 2 loaded, 1 reused,
    1 failed``: run in this sweep, loaded from the files an interrupted sweep left,
    reused from runs already in the store, failed (of those run or loaded)."""
    failed = sum(r["status"] == "failed" for r in rows)
    reused = sum(bool(r["reused"]) for r in rows)
    loaded = sum(bool(r.get("loaded")) and r["status"] != "failed" for r in rows)
    ran = len(rows) - reused - loaded - failed
    return f"{len(rows)} cells: {ran} run, {loaded} loaded, {reused} reused, {failed} failed"

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
    cells = [[_show(row.get(c)) + (" (reused)" if c == "status" and row.get("reused") else "")
              for c in _COLUMNS] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(_COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(_COLUMNS, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    lines += [f"failed: {row['cell']} seed {row['seed']}: {row['error']}"
              for row in rows if row.get("status") == "failed"]
    return "\n".join(lines)


def verdict(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line for the flow's final state, e.g. ``16 cells: 14 run, 1 reused, 1 failed``."""
    failed = sum(r["status"] == "failed" for r in rows)
    reused = sum(bool(r["reused"]) for r in rows)
    return f"{len(rows)} cells: {len(rows) - reused - failed} run, {reused} reused, {failed} failed"

"""``core export``: some runs' rows, their metrics (long format: run_id, step, name, value)
and their stored rollout turns, written by DuckDB's own COPY as Parquet, CSV or JSON lines,
for analysis elsewhere.

A turn's pictures (``rollouts.images``, PNG bytes) go out whole: in Parquet as a list of
binary values, in JSON lines as a list of base64 strings, in CSV as base64 strings
separated by a space (base64 has none)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mirage.core.store.file import READ_LOCK_TIMEOUT, connect_with_retry
from mirage.core.store.rollouts import ROLLOUT_FIELDS, ROLLOUT_ORDER

# DuckDB's COPY format per choice; JSON lines are its "json" format (one object a line).
FORMATS = {"parquet": "parquet", "csv": "csv", "jsonl": "json"}
# In JSON lines the JSON text columns become nested objects, not strings.
_JSON_COLUMNS = ("config", "plugins", "environment")
# The pictures per format: text formats carry them as base64.
_IMAGES = {
    "parquet": "images",
    "jsonl": "list_transform(images, lambda png: to_base64(png)) AS images",
    "csv": "array_to_string(list_transform(images, lambda png: to_base64(png)), ' ') AS images",
}


def export_runs(db: Path, run_ids: Sequence[str], out: Path, fmt: str) -> list[Path]:
    """Write ``runs.EXT``, ``metrics.EXT`` and ``rollouts.EXT`` for ``run_ids`` into the
    folder ``out`` (created; files there replaced); return their paths. ValueError for an
    unknown format. The store must be of today's schema (``RunStore`` migrates it)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    out.mkdir(parents=True, exist_ok=True)
    runs_select = "SELECT * FROM runs"
    if fmt == "jsonl":
        runs_select = ("SELECT * REPLACE (" + ", ".join(f"{c}::JSON AS {c}" for c in _JSON_COLUMNS)
                       + ") FROM runs")
    turn_columns = ", ".join(_IMAGES[fmt] if f == "images" else f for f in ROLLOUT_FIELDS)
    queries = {
        "runs": f"{runs_select} WHERE list_contains($ids, run_id) ORDER BY created_at, run_id",
        "metrics": "SELECT run_id, step, name, value FROM metrics WHERE list_contains($ids, run_id)"
                   " ORDER BY run_id, step, name",
        "rollouts": f"SELECT run_id, step, {turn_columns} FROM rollouts"
                    f" WHERE list_contains($ids, run_id) ORDER BY run_id, {ROLLOUT_ORDER}",
    }
    written = []
    con = connect_with_retry(db, read_only=True, lock_timeout=READ_LOCK_TIMEOUT)
    try:
        for table, query in queries.items():
            target = out / f"{table}.{fmt}"
            con.execute(f"COPY ({query}) TO '{_quoted(target)}' (FORMAT {FORMATS[fmt]})",
                        {"ids": list(run_ids)})
            written.append(target)
    finally:
        con.close()
    return written


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")

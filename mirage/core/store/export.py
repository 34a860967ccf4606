"""``core export``: some runs' rows and metrics (long format: run_id, step, name, value)
written by DuckDB's own COPY as Parquet, CSV or JSON lines, for analysis elsewhere."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mirage.core.store.file import READ_LOCK_TIMEOUT, connect_with_retry

# DuckDB's COPY format per choice; JSON lines are its "json" format (one object a line).
FORMATS = {"parquet": "parquet", "csv": "csv", "jsonl": "json"}
# In JSON lines the JSON text columns become nested objects, not strings.
_JSON_COLUMNS = ("config", "plugins", "environment")


def export_runs(db: Path, run_ids: Sequence[str], out: Path, fmt: str) -> list[Path]:
    """Write ``runs.EXT`` and ``metrics.EXT`` for ``run_ids`` into the folder ``out``
    (created; files there replaced); return their paths. ValueError for an unknown format."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    out.mkdir(parents=True, exist_ok=True)
    runs_select = "SELECT * FROM runs"
    if fmt == "jsonl":
        runs_select = ("SELECT * REPLACE (" + ", ".join(f"{c}::JSON AS {c}" for c in _JSON_COLUMNS)
                       + ") FROM runs")
    queries = {
        "runs": f"{runs_select} WHERE list_contains($ids, run_id) ORDER BY created_at, run_id",
        "metrics": "SELECT run_id, step, name, value FROM metrics WHERE list_contains($ids, run_id)"
                   " ORDER BY run_id, step, name",
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

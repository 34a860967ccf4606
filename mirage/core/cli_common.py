"""What every ``core`` command shares: the one-line error and the store it works on."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Optional

import typer

from mirage.core.store import default_db_path

DB_HELP = "DuckDB run store [default: $MIRAGE_DB or runs/mirage.duckdb]"


def fail(message: str) -> NoReturn:
    """``error: MESSAGE`` on stderr, exit status 2 (bad input; nothing was written)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def store_path(db: Optional[Path]) -> Path:
    return db if db is not None else default_db_path()

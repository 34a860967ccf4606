"""What every ``core`` command shares, core's own and those plugins add: the one-line
error, the store it works on, the ``--set``/``--grid`` parsers and the input checks that
run before anything is loaded."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from mirage.core.config.overrides import parse_settings, raw_pairs
from mirage.core.config.paths import check_model_path, check_store_path
from mirage.core.errors import ConfigError
from mirage.core.store.file import unreadable_problem
from mirage.core.store.run_store import default_db_path

DB_HELP = "DuckDB run store [default: $MIRAGE_DB or runs/mirage.duckdb]"
REGISTRY_HELP = "experiment registry [default: ./registry.yaml, else the one shipped with the package]"


def fail(message: str) -> NoReturn:
    """``error: MESSAGE`` on stderr, exit status 2 (bad input; nothing was written)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def store_path(db: Optional[Path]) -> Path:
    return db if db is not None else default_db_path()


def settings(pairs: list[str], flag: str = "--set") -> dict[str, Any]:
    """``--set PATH=VALUE`` options typed by the config (:mod:`mirage.core.config.overrides`);
    a bad one fails the command."""
    try:
        return parse_settings(pairs, flag)
    except ConfigError as error:
        fail(str(error))


def pairs(given: list[str], flag: str, form: str = "PATH=VALUE") -> dict[str, Any]:
    """``KEY=VALUE`` options (VALUE as JSON, else text) as a dict; a malformed one fails
    the command."""
    try:
        return raw_pairs(given, flag, form)
    except ConfigError as error:
        fail(str(error))


def check_readable_store(path: Path, flag: str = "--db") -> None:
    """Refuse, in one line with exit 2, a store a command is to read: an empty path, a
    missing file, a directory, an unreadable file, a file that is not a DuckDB database
    or holds no run store this code can read (damaged, or of a newer schema)."""
    try:
        check_store_path(path, flag, write=False)
    except ConfigError as error:
        fail(str(error))
    if problem := unreadable_problem(path):
        fail(f"{flag} {str(path)!r} {problem}")


def check_paths(db: Optional[Path], model: Optional[str]) -> None:
    """Refuse a bad --db or --model before anything is loaded (one line, exit 2)."""
    try:
        if db is not None:
            check_store_path(db)
        if model is not None:
            check_model_path(model)
    except ConfigError as error:
        fail(str(error))


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def check_host(host: str, flag: str = "--host") -> None:
    """Refuse (exit 2) a ``--host`` that is empty or neither an IP address nor a host
    name (labels of letters, digits and hyphens)."""
    if not host.strip():
        fail(f"{flag}: empty; expected an address such as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)")
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if re.fullmatch(r"[0-9.]+", host) or len(host) > 253 or not all(_HOST_LABEL.fullmatch(x) for x in labels):
        fail(f"{flag} {host!r} is not an IP address or a host name; expected one such as 127.0.0.1, "
             "localhost or 0.0.0.0")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1 or localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

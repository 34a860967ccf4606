"""``core app``: compare runs in the Streamlit app. A built-in command plugin (listed in
:mod:`mirage.builtins`): the ``core`` program asks it for its command through
``mirage_register_commands``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from mirage.core.cli.common import DB_HELP, check_readable_store, fail
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.store.run_store import default_db_path


def app_command(
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    port: Optional[int] = typer.Option(None, help="port to serve on [default: Streamlit's, 8501]"),
    headless: bool = typer.Option(False, help="do not open a browser"),
) -> None:
    """Compare runs in the Streamlit app (opens the store read-only, one query at a time)."""
    import os

    from mirage.app.launch import streamlit_argv

    target = db or default_db_path()
    if target.exists():  # a store not written yet is fine: the app shows runs as they come
        check_readable_store(target)
    if port is not None and not 0 < port < 65536:
        fail(f"--port {port} is not a port number (1-65535)")
    argv = streamlit_argv(target, port=port, headless=headless)
    os.execv(argv[0], argv)  # Streamlit takes over this process (one pid to stop)


@hookimpl
def mirage_register_commands(cli: typer.Typer) -> None:
    cli.command(name="app")(app_command)

"""``core app``: compare runs in the Streamlit app. A built-in command plugin (listed in
:mod:`mirage.builtins`): the ``core`` program asks it for its command through
``mirage_register_commands``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from mirage.core.cli.common import DB_HELP, check_host, check_readable_store, fail, is_loopback
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.store.run_store import default_db_path


def app_command(
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    port: Optional[int] = typer.Option(None, help="port to serve on [default: Streamlit's, 8501]"),
    headless: bool = typer.Option(False, help="do not open a browser"),
    host: str = typer.Option("127.0.0.1", help="address to listen on: 127.0.0.1 serves this machine "
                             "only; 0.0.0.0 serves every interface (no authentication: see docs/security.md)"),
) -> None:
    """Compare runs in the Streamlit app (opens the store read-only, one query at a time)."""
    import os

    from mirage.app.launch import DEFAULT_PORT, streamlit_argv

    target = db or default_db_path()
    if target.exists():  # a store not written yet is fine: the app shows runs as they come
        check_readable_store(target)
    if port is not None and not 0 < port < 65536:
        fail(f"--port {port} is not a port number (1-65535)")
    check_host(host)
    where = f"http://{host if ':' not in host else f'[{host}]'}:{port or DEFAULT_PORT}"
    if is_loopback(host):
        typer.echo(f"core app: serving {target} at {where} (this machine only; --host to expose it)", err=True)
    else:
        typer.echo(f"warning: core app --host {host} serves every run in {target} (configs, rollouts with their "
                   f"prompts, reasoning and generated code, notes) to anyone who can reach this machine on port "
                   f"{port or DEFAULT_PORT}, with no authentication (docs/security.md)", err=True)
    argv = streamlit_argv(target, port=port, headless=headless, host=host)
    os.execv(argv[0], argv)  # Streamlit takes over this process (one pid to stop)


@hookimpl
def mirage_register_commands(cli: typer.Typer) -> None:
    cli.command(name="app")(app_command)

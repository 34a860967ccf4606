"""The ``core`` program's entry point, with the built-in plugins of the floors above core.

``mirage/core`` imports nothing from flows, report or app. Their commands reach the
``core`` program as plugins, through the ``mirage_register_commands`` hook, and they are
listed here, outside core: not in ``mirage.core.plugin_api.manager.DEFAULT_PLUGINS`` (what a run
loads; core would name the floors above it) and not as entry points (the autoload switch
and allowlist would drop ``core sweep``, and a change would need a reinstall to count).
``python -m mirage`` and the installed ``core`` script run :func:`main`.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

import typer

from mirage.core.cli.program import build_cli
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.manager import build_plugins
from mirage.moved_paths import MirageDeprecationWarning

COMMAND_PLUGINS = (
    "mirage.flows.commands",   # sweep, sweeps, serve
    "mirage.report.commands",  # report
    "mirage.app.commands",     # app
    "mirage.probe.commands",   # probe
    "mirage.plugins.backend_local.commands",  # warmstart
    "mirage.plugins.backend_local.merge",  # merge
)


def cli(extra: Sequence[tuple[str, object]] = ()) -> typer.Typer:
    """The whole ``core`` program: core's own commands, then those of ``COMMAND_PLUGINS``,
    of the installed entry points and of ``extra`` (name, plugin) pairs."""
    return build_cli(build_plugins(extra, builtins=COMMAND_PLUGINS))


def main() -> None:
    # a plugin on an old path or constructor is told so once (Python hides DeprecationWarning
    # outside __main__ by default)
    warnings.filterwarnings("default", category=MirageDeprecationWarning)
    plugins = build_plugins(builtins=COMMAND_PLUGINS)
    try:
        program = build_cli(plugins)
    except ConfigError as error:  # two built-in plugins add one command name
        typer.echo(f"error: {error}", err=True)
        sys.exit(2)
    for failure in plugins.failed:  # said once, here; `core plugins` lists them too
        typer.echo(f"warning: {failure.line()}", err=True)
    program(prog_name="core")

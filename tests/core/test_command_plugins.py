"""Commands come from plugins (issue #21): the ``core`` program holds core's own commands
and asks every loaded plugin for more through ``mirage_register_commands``; flows, report
and app add theirs that way, and so can a third-party plugin."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

from mirage.builtins import COMMAND_PLUGINS, cli as core_program
from mirage.core.cli import program as core_cli
from mirage.core.cli.common import fail
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.manager import build_plugins


def greet(
    name: str = typer.Argument(..., help="who to greet"),
    shout: bool = typer.Option(False, help="in capitals"),
) -> None:
    """Greet someone (a throwaway plugin's command)."""
    if not name.strip():
        fail("NAME cannot be empty")
    text = f"hello {name}"
    typer.echo(text.upper() if shout else text)


def command_plugin(*commands, names=None) -> SimpleNamespace:
    @hookimpl
    def mirage_register_commands(cli: typer.Typer) -> None:
        for command, name in zip(commands, names or [None] * len(commands)):
            cli.command(name=name)(command)

    return SimpleNamespace(mirage_register_commands=mirage_register_commands)


def invoke(program: typer.Typer, *args: str):
    return CliRunner().invoke(program, list(args), env={"COLUMNS": "200"})


def test_a_third_party_plugin_adds_a_command():
    program = core_program(extra=[("greeter", command_plugin(greet))])
    result = invoke(program, "greet", "ada", "--shout")
    assert (result.exit_code, result.stdout) == (0, "HELLO ADA\n")
    assert "Greet someone" in invoke(program, "--help").stdout
    result = invoke(program, "greet", " ")
    assert result.exit_code == 2 and result.stderr == "error: NAME cannot be empty\n"


def test_the_upper_floors_commands_come_from_their_plugins():
    loaded = build_plugins(builtins=COMMAND_PLUGINS)
    owners = {impl.plugin_name for impl in loaded.hook.mirage_register_commands.get_hookimpls()}
    assert owners == set(COMMAND_PLUGINS)
    core_only = set(typer.main.get_command(core_cli.app).commands)
    everything = set(typer.main.get_command(core_program()).commands)
    assert everything - core_only == {"sweep", "sweeps", "serve", "report", "app", "warmstart", "merge", "probe"}
    assert {"run", "preflight", "experiments", "plugins", "runs", "diff"} <= core_only


@pytest.mark.parametrize("name", ["run", "sweep"])
def test_a_plugin_adding_a_command_name_already_taken_is_set_aside(name):
    from mirage.core.plugin_api import manager as plugin_builder

    clash = command_plugin(greet, names=[name])
    loaded = build_plugins(extra=[("greeter", clash)], builtins=COMMAND_PLUGINS)
    program = core_cli.build_cli(loaded)
    try:
        owner = "mirage.core.cli.program" if name == "run" else "mirage.flows.commands"
        (failure,) = loaded.failed
        assert failure.rule == f"adds command {name!r}, which {owner!r} already adds"
        kept = typer.main.get_command(program).commands[name].callback
        assert kept.__name__ != "greet"  # its command is gone; the built-in one stays
        # later builds in this process (a run's) leave the plugin out whole
        assert [f.name for f in build_plugins(extra=[("greeter", clash)]).failed] == ["greeter"]
    finally:
        plugin_builder._SET_ASIDE.clear()


def test_the_program_runs_as_python_dash_m_mirage(cli):
    code, out, err = cli("--help")
    assert code == 0, err
    for command in ("run", "sweep", "report", "app"):
        assert f"  {command} " in out

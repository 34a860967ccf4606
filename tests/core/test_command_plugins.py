"""Commands come from plugins (issue #21): the ``core`` program holds core's own commands
and asks every loaded plugin for more through ``mirage_register_commands``; flows, report
and app add theirs that way, and so can a third-party plugin."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

from mirage.builtins import COMMAND_PLUGINS, cli as core_program
from mirage.core import cli as core_cli
from mirage.core.cli_common import fail
from mirage.core.hookspecs import hookimpl
from mirage.core.validate import ConfigError


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
    from mirage.core.plugins import build_plugins

    loaded = build_plugins(builtins=COMMAND_PLUGINS)
    owners = {impl.plugin_name for impl in loaded.hook.mirage_register_commands.get_hookimpls()}
    assert owners == set(COMMAND_PLUGINS)
    core_only = set(typer.main.get_command(core_cli.app).commands)
    everything = set(typer.main.get_command(core_program()).commands)
    assert everything - core_only == {"sweep", "sweeps", "serve", "report", "app", "warmstart"}
    assert {"run", "preflight", "experiments", "plugins", "runs", "diff"} <= core_only


@pytest.mark.parametrize("name", ["run", "sweep"])
def test_a_command_name_already_taken_is_refused_naming_both_plugins(name):
    clash = command_plugin(greet, names=[name])
    with pytest.raises(ConfigError) as info:
        core_program(extra=[("greeter", clash)])
    owner = "mirage.core.cli" if name == "run" else "mirage.flows.commands"
    assert str(info.value) == f"plugin 'greeter' adds command {name!r}, which {owner!r} already adds"


def test_the_program_runs_as_python_dash_m_mirage(cli):
    code, out, err = cli("--help")
    assert code == 0, err
    for command in ("run", "sweep", "report", "app"):
        assert f"  {command} " in out

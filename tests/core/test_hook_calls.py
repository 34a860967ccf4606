"""Registration and command hooks are called through pluggy (mirage/core/plugin_api/hook_calls.py):
a ``wrapper=True`` implementation runs around the others, the order is pluggy's, and each
registration or command is still its own plugin's, so only the plugin at fault is set aside."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from mirage.builtins import COMMAND_PLUGINS, cli as core_program
from mirage.core.cli.program import build_cli
from mirage.core.plugin_api.components import Filter
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.manager import build_plugins


class KeepAll(Filter):
    def select(self, batch): ...


class Plain:
    """Registers the filter ``NAME_keep`` and notes that it was called."""

    def __init__(self, name: str, calls: list[str], *, fail: bool = False) -> None:
        self.name, self.calls, self.fail = name, calls, fail

    @hookimpl
    def mirage_register_filters(self, register):
        self.calls.append(self.name)
        register(f"{self.name}_keep", KeepAll)
        if self.fail:
            raise RuntimeError(f"{self.name} broke")


class First(Plain):
    @hookimpl(tryfirst=True)
    def mirage_register_filters(self, register):
        super().mirage_register_filters(register)


class Wrapping:
    """Runs around the other registrations and registers ``wrapped_keep`` after them."""

    def __init__(self, calls: list[str], *, fail: bool = False) -> None:
        self.calls, self.fail = calls, fail

    @hookimpl(wrapper=True)
    def mirage_register_filters(self, register):
        self.calls.append("before")
        result = yield
        self.calls.append("after")
        register("wrapped_keep", KeepAll)
        if self.fail:
            raise RuntimeError("the wrapper broke")
        return result


@pytest.fixture
def wrapped():
    """A plain throwaway plugin and a wrapper around the registration hooks, beside the
    built-ins; unregistered afterwards."""
    calls: list[str] = []
    loaded = build_plugins(extra=[("plain", Plain("plain", calls)), ("wrapping", Wrapping(calls))])
    yield loaded, calls
    for name in ("plain", "wrapping"):
        loaded.manager.unregister(name=name)


def test_a_registration_wrapper_runs_around_the_others(wrapped):
    loaded, calls = wrapped
    assert calls == ["before", "plain", "after"]
    assert not loaded.failed
    assert loaded.registries.filters.owner("wrapped_keep") == "wrapping"  # registered after its yield
    assert loaded.registries.filters.owner("plain_keep") == "plain"
    assert loaded.registries.filters.owner("top_p") == "mirage.plugins.filters"
    assert loaded.info("wrapping").components == {"filters": ["wrapped_keep"]}
    assert loaded.info("plain").components == {"filters": ["plain_keep"]}


def test_registration_hooks_are_called_in_pluggys_order():
    """The last plugin registered is called first, a tryfirst one before all (the reverse
    of the order in which the manager holds them)."""
    calls: list[str] = []
    loaded = build_plugins(extra=[("early", First("early", calls)), ("one", Plain("one", calls)),
                                  ("two", Plain("two", calls))])
    assert calls == ["early", "two", "one"]
    impls = loaded.hook.mirage_register_filters.get_hookimpls()
    pluggy_order = [impl.plugin_name for impl in reversed(impls)]
    assert [name for name in pluggy_order if name in calls] == calls
    assert pluggy_order[-1] == "mirage.plugins.filters"  # loaded first, called last
    assert [loaded.registries.filters.owner(f"{name}_keep") for name in calls] == calls


def test_the_plugin_whose_code_raised_is_set_aside_not_the_wrapper_around_it():
    calls: list[str] = []
    loaded = build_plugins(extra=[("plain", Plain("plain", calls, fail=True)), ("wrapping", Wrapping(calls))])
    (failure,) = loaded.failed
    assert failure.name == "plain"
    assert "mirage_register_filters raised RuntimeError: plain broke" in failure.rule
    assert failure.components == {"filters": ["plain_keep"]}
    assert "plain_keep" not in loaded.registries.filters
    assert loaded.registries.filters.owner("wrapped_keep") == "wrapping"
    assert calls == ["before", "plain", "before", "after"]  # called again without it


def test_a_wrapper_that_raises_is_set_aside_and_the_others_keep_their_components():
    calls: list[str] = []
    loaded = build_plugins(extra=[("plain", Plain("plain", calls)), ("wrapping", Wrapping(calls, fail=True))])
    (failure,) = loaded.failed
    assert failure.name == "wrapping"
    assert "raised RuntimeError: the wrapper broke" in failure.rule
    assert "wrapped_keep" not in loaded.registries.filters
    assert loaded.registries.filters.owner("plain_keep") == "plain"


def hello() -> None:
    """Say hello."""
    typer.echo("hello")


def command_names(cli: typer.Typer) -> set[str]:
    return {info.name or typer.main.get_command_name(info.callback.__name__)
            for info in cli.registered_commands}


class WrapsCommands:
    """Sees the other plugins' commands after its yield, then adds its own."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}

    @hookimpl(wrapper=True)
    def mirage_register_commands(self, cli):
        self.seen["before"] = command_names(cli)
        result = yield
        self.seen["after"] = command_names(cli)
        cli.command()(hello)
        return result


def test_a_command_wrapper_runs_around_the_other_plugins_commands():
    plugin = WrapsCommands()
    program = core_program(extra=[("wraps", plugin)])
    assert "run" in plugin.seen["before"] and "sweep" not in plugin.seen["before"]
    assert {"sweep", "report", "app"} <= plugin.seen["after"]
    result = CliRunner().invoke(program, ["hello"])
    assert (result.exit_code, result.stdout) == (0, "hello\n")
    listed = list(typer.main.get_command(program).commands)
    assert listed[-1] == "hello"  # listed after the built-ins' commands: load order


class RaisesInCommands:
    @hookimpl
    def mirage_register_commands(self, cli):
        cli.command()(hello)
        raise RuntimeError("no such library")


def test_a_command_hook_that_raises_is_set_aside_with_its_commands():
    from mirage.core.plugin_api import manager as plugin_builder

    loaded = build_plugins(extra=[("raises", RaisesInCommands())], builtins=COMMAND_PLUGINS)
    try:
        program = build_cli(loaded)
        (failure,) = loaded.failed
        assert failure.name == "raises"
        assert failure.rule == "mirage_register_commands raised RuntimeError: no such library"
        assert failure.place.startswith(f"{__file__}:")
        commands = typer.main.get_command(program).commands
        assert "hello" not in commands and {"run", "sweep", "report"} <= set(commands)
    finally:
        plugin_builder._SET_ASIDE.pop("raises", None)

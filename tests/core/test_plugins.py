"""The plugin manager (mirage/core/plugin_api/manager.py) and the hook specifications.

Plugins are tested the STYLE way: a throwaway plugin is registered in a fixture, its
hooks are exercised through the manager, and it is unregistered afterwards.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pluggy
import pytest

from mirage.builtins import COMMAND_PLUGINS
from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api import hookspecs
from mirage.core.plugin_api import manager as plugins_module
from mirage.core.plugin_api.components import Filter
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.manager import DEFAULT_PLUGINS, ENTRY_POINT_GROUP, build_plugins
from mirage.core.rl.batch import Batch, Group, Selection, Trajectory
from mirage.core.run.stages import diagnose
from mirage.core.run.validate import build_component, validate_config

MIRAGE_VERSION = metadata.version("mirage-rl")


# --------------------------------------------------------------------------- a throwaway plugin


class KeepFirst(Filter):
    """Keeps only the first prompt group."""

    def select(self, batch: Batch) -> Selection:
        return Selection([0], metrics={"filter/kept_groups": 1.0})


class ThrowawayPlugin:
    """A plugin object (pluggy accepts any object with hookimpl-marked attributes)."""

    __version__ = "9.8.7"

    def __init__(self):
        self.diagnosed: list[int] = []

    @hookimpl
    def mirage_register_filters(self, register):
        register("keep_first", KeepFirst)

    @hookimpl
    def mirage_diagnose(self, run, batch):
        self.diagnosed.append(run.step)
        return {"throwaway/groups": float(len(batch.groups))}


@pytest.fixture
def throwaway():
    plugin = ThrowawayPlugin()
    loaded = build_plugins(extra=[("throwaway", plugin)])
    yield loaded, plugin
    loaded.manager.unregister(name="throwaway")
    assert loaded.manager.get_plugin("throwaway") is None


def small_batch(groups: int = 3) -> Batch:
    return Batch(step=2, groups=[
        Group(prompt_index=i, seed=i, trajectories=[Trajectory(i, 0, i)]) for i in range(groups)
    ])


def test_throwaway_component_is_registered_with_its_owner(throwaway):
    loaded, _ = throwaway
    filters = loaded.registries.filters
    assert filters.get("keep_first") is KeepFirst
    assert filters.owner("keep_first") == "throwaway"
    assert filters.owner("top_p") == "mirage.plugins.filters"
    assert filters.names() == ["entropy", "keep_first", "length", "none", "quartile", "top_k", "top_p",
                               "trajectory"]


def test_plugin_info_lists_hooks_components_and_version(throwaway):
    loaded, _ = throwaway
    info = loaded.info("throwaway")
    assert info.builtin is False
    assert info.version == "9.8.7"
    assert info.hooks == ["mirage_diagnose", "mirage_register_filters"]
    assert info.components == {"filters": ["keep_first"]}
    assert loaded.records()[-1] == {"name": "throwaway", "version": "9.8.7"}
    assert [r["name"] for r in loaded.records()] == [*DEFAULT_PLUGINS, "throwaway"]
    with pytest.raises(KeyError):
        loaded.info("nosuch")


def test_builtin_plugin_infos():
    loaded = build_plugins()
    assert [i.name for i in loaded.infos] == list(DEFAULT_PLUGINS)
    assert all(i.builtin and i.version == MIRAGE_VERSION for i in loaded.infos)
    assert loaded.info("mirage.plugins.filters").components == {
        "filters": ["none", "top_p", "top_k", "trajectory", "entropy", "length", "quartile"]}
    assert loaded.info("mirage.envs.plugin").components == {"envs": [
        "sokoban", "frozenlake", "countdown", "metamathqa", "searchqa", "webshop", "deepcoder"]}
    assert loaded.info("mirage.plugins.stages").hooks == [
        "mirage_cross_score", "mirage_diagnose", "mirage_filter", "mirage_score", "mirage_update"
    ]


def test_throwaway_filter_validates_and_selects(throwaway):
    loaded, _ = throwaway
    config = RunConfig.model_validate({"filter": {"name": "keep_first"}})
    validate_config(config, loaded)  # a name from a third-party plugin is a valid name
    batch = small_batch()
    selection = build_component(config, loaded.registries, "filter", "keep_first").select(batch)
    batch.apply(selection)
    assert [g.kept for g in batch.groups] == [True, False, False]


def test_throwaway_diagnostic_is_merged_with_the_builtins(throwaway):
    loaded, plugin = throwaway
    run = SimpleNamespace(hook=loaded.hook, plugins=loaded, config=RunConfig(), step=2, diagnostics={})
    merged = diagnose(run, small_batch(3))
    assert merged["throwaway/groups"] == 3.0
    assert "time/diagnose" in merged
    assert plugin.diagnosed == [2]


def test_unregistered_plugin_is_no_longer_called(throwaway):
    loaded, plugin = throwaway
    loaded.manager.unregister(name="throwaway")
    run = SimpleNamespace(hook=loaded.hook, plugins=loaded, config=RunConfig(), step=2, diagnostics={})
    assert diagnose(run, small_batch()) == {}
    assert plugin.diagnosed == []
    loaded.manager.register(plugin, name="throwaway")  # the fixture unregisters it again


class DuplicateTopP:
    @hookimpl
    def mirage_register_filters(self, register):
        register("top_p", KeepFirst)


def test_a_plugin_reusing_a_built_in_name_is_set_aside():
    loaded = build_plugins(extra=[("dupe", DuplicateTopP())])
    (failure,) = loaded.failed
    message = failure.line()
    assert "'top_p'" in message and "mirage.plugins.filters" in message and "dupe" in message
    assert loaded.registries.filters.owner("top_p") == "mirage.plugins.filters"
    assert "dupe" not in [info.name for info in loaded.infos]


def test_of_two_plugins_registering_one_name_the_second_is_set_aside():
    loaded = build_plugins(extra=[("first", ThrowawayPlugin()), ("second", ThrowawayPlugin())])
    (failure,) = loaded.failed
    assert failure.name == "second"
    assert "'keep_first' registered twice (by first and second)" in failure.rule
    assert loaded.registries.filters.owner("keep_first") == "first"


# --------------------------------------------------------------------------- entry points


ENTRY_POINT_MODULE = '''
"""Entry-point plugin {name}."""
from mirage.core.plugin_api.components import Filter
from mirage.core.plugin_api.hookspecs import hookimpl

LOADED = True


class Anything(Filter):
    def select(self, batch): ...


@hookimpl
def mirage_register_filters(register):
    register("{name}_filter", Anything)
'''


@pytest.fixture
def fake_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two installed entry points, ep_alpha and ep_beta, pointing at modules in tmp_path.

    Returns the list of groups ``entry_points`` was asked for (to see whether it was
    consulted at all)."""
    names = ["ep_alpha", "ep_beta"]
    for name in names:
        (tmp_path / f"mirage_test_{name}.py").write_text(
            textwrap.dedent(ENTRY_POINT_MODULE.format(name=name))
        )
        monkeypatch.delitem(sys.modules, f"mirage_test_{name}", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    # Listed out of order: the manager loads them sorted by name.
    found = [metadata.EntryPoint(name=n, value=f"mirage_test_{n}", group=ENTRY_POINT_GROUP)
             for n in reversed(names)]
    asked: list[str] = []

    def entry_points(*, group: str):
        asked.append(group)
        return [ep for ep in found if ep.group == group]

    monkeypatch.setattr(plugins_module.metadata, "entry_points", entry_points)
    yield asked
    for name in names:
        sys.modules.pop(f"mirage_test_{name}", None)


def third_party(loaded) -> list[str]:
    return [info.name for info in loaded.infos if not info.builtin]


@pytest.mark.plugin_autoload
def test_entry_points_are_loaded_sorted_by_name(fake_entry_points):
    loaded = build_plugins()
    assert fake_entry_points == [ENTRY_POINT_GROUP]
    assert third_party(loaded) == ["ep_alpha", "ep_beta"]
    assert loaded.registries.filters.owner("ep_alpha_filter") == "ep_alpha"
    assert loaded.registries.filters.owner("ep_beta_filter") == "ep_beta"
    info = loaded.info("ep_beta")
    assert info.hooks == ["mirage_register_filters"]
    assert info.components == {"filters": ["ep_beta_filter"]}
    assert info.version == "unknown"  # no distribution behind a hand-made entry point
    assert {"name": "ep_alpha", "version": "unknown"} in loaded.records()


@pytest.mark.plugin_autoload
@pytest.mark.parametrize(
    "allow, expected",
    [("ep_beta", ["ep_beta"]), (" ep_beta , ep_alpha ", ["ep_alpha", "ep_beta"]),
     ("ep_alpha,nosuch", ["ep_alpha"]), ("", [])],
)
def test_allowlist_selects_entry_points(fake_entry_points, monkeypatch, allow, expected):
    monkeypatch.setenv("MIRAGE_PLUGINS", allow)
    loaded = build_plugins()
    assert third_party(loaded) == expected
    assert [n for n in loaded.registries.filters if n.startswith("ep_")] == [
        f"{n}_filter" for n in expected
    ]
    assert [i.name for i in loaded.infos if i.builtin] == list(DEFAULT_PLUGINS)
    for name in ["ep_alpha", "ep_beta"]:  # an entry point left out is not even imported
        assert (f"mirage_test_{name}" in sys.modules) == (name in expected)


@pytest.mark.plugin_autoload
@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_kill_switch_loads_no_entry_point(fake_entry_points, monkeypatch, value):
    monkeypatch.setenv("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", value)
    monkeypatch.setenv("MIRAGE_PLUGINS", "ep_alpha,ep_beta")  # the kill switch wins
    loaded = build_plugins(extra=[("throwaway", ThrowawayPlugin())])
    assert fake_entry_points == []  # not even consulted
    assert third_party(loaded) == ["throwaway"]  # explicit extras still load
    assert "mirage_test_ep_alpha" not in sys.modules
    assert [i.name for i in loaded.infos if i.builtin] == list(DEFAULT_PLUGINS)


@pytest.mark.plugin_autoload
@pytest.mark.parametrize("value", ["0", ""])
def test_kill_switch_off_values_load_entry_points(fake_entry_points, monkeypatch, value):
    monkeypatch.setenv("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", value)
    assert third_party(build_plugins()) == ["ep_alpha", "ep_beta"]


def test_building_a_manager_twice_gives_independent_managers(throwaway):
    loaded, _ = throwaway
    again = build_plugins()
    assert "keep_first" not in again.registries.filters
    assert again.manager is not loaded.manager


# --------------------------------------------------------------------------- hookspec meta-test


def hookspec_functions() -> dict[str, object]:
    return {
        name: fn for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("mirage_") and hasattr(fn, f"{hookspecs.PROJECT}_spec")
    }


def test_hookspecs_are_found():
    names = set(hookspec_functions())
    assert {"mirage_rollout", "mirage_score", "mirage_filter", "mirage_update",
            "mirage_diagnose", "mirage_register_filters"} <= names


@pytest.mark.parametrize("name", sorted(hookspec_functions()))
def test_hookspec_docstring_says_whether_the_first_result_wins(name):
    fn = hookspec_functions()[name]
    doc = inspect.getdoc(fn) or ""
    firstresult = getattr(fn, f"{hookspecs.PROJECT}_spec")["firstresult"]
    says_first = "First" in doc
    says_all = "All results" in doc or "every implementation" in doc.lower()
    assert says_first or says_all, f"{name}: docstring does not say whether the first result wins"
    assert says_first == firstresult, f"{name}: firstresult={firstresult} but docstring disagrees"
    assert "called" in doc.lower(), f"{name}: docstring does not say when it is called"


@pytest.mark.parametrize("name", sorted(hookspec_functions()))
def test_every_hookspec_has_a_builtin_implementation(name):
    builtins = DEFAULT_PLUGINS + COMMAND_PLUGINS  # a run's built-ins and the core program's
    loaded = build_plugins(builtins=builtins)
    implementers = {impl.plugin_name for impl in getattr(loaded.hook, name).get_hookimpls()}
    assert implementers & set(builtins), f"{name} has no built-in implementation"


def test_every_builtin_hookimpl_matches_a_hookspec():
    loaded = build_plugins()
    specs = set(hookspec_functions())
    for info in loaded.infos:
        assert set(info.hooks) <= specs, info.name
    # pluggy refuses unknown hooks only on check_pending(); do it explicitly.
    loaded.manager.check_pending()


def test_manager_uses_the_mirage_project_name():
    loaded = build_plugins()
    assert isinstance(loaded.manager, pluggy.PluginManager)
    assert loaded.manager.project_name == "mirage"


# --------------------------------------------------------------------------- core plugins


def test_core_plugins_lists_builtins_with_versions_and_components(cli):
    code, out, err = cli("plugins")
    assert code == 0, err
    lines = out.splitlines()
    for name in DEFAULT_PLUGINS:
        assert f"{name} {MIRAGE_VERSION} (built-in)" in lines
    listed: dict[str, set[str]] = {}
    for line in lines:
        kind, sep, names = line.strip().partition(": ")
        if sep and kind != "hooks":
            listed.setdefault(kind, set()).update(n.strip() for n in names.split(","))
    assert listed == {
        "envs": {"sokoban", "frozenlake", "countdown", "metamathqa", "searchqa", "webshop", "deepcoder"},
        "backends": {"local", "vllm"},
        "algorithms": {"ppo", "grpo", "dapo", "drgrpo"},
        "estimators": {"gae", "grpo"},
        "filters": {"none", "top_p", "top_k", "trajectory", "entropy", "length", "quartile"},
        "diagnostics": {"mi", "reward", "grad", "collapse"},
        "loggers": {"wandb", "mlflow", "tensorboard"},
    }
    assert "  hooks: mirage_rollout" in lines

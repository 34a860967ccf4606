"""Plugins written against the plugin API of 4 December 2026 load on today's code,
unedited (issue #47): each with one deprecation warning naming ``mirage.plugin``, each
behaving as it did then. The six packages live in tests/core/data/plugins_dec4/ (README
there), each with the ``.dist-info`` a ``pip install`` would leave, so they load through
the real entry-point path."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from mirage.core.config.presets import TINY
from mirage.core.plugin_api import manager
from mirage.core.plugin_api.manager import build_plugins
from mirage.moved_paths import MirageDeprecationWarning
from mirage.core.rl.batch import Batch, Group, Trajectory, Turn
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_component, build_config
from mirage.core.store.run_store import RunStore

DEC4 = Path(__file__).parent / "data" / "plugins_dec4"
PACKAGES = {
    "dec4_filter": {"filters": ["best_mean"]},
    "dec4_duck_filter": {"filters": ["duck_spread"]},
    "dec4_rule_breaker": {"filters": ["out_of_range"]},
    "dec4_env": {"envs": ["dec4_difference"]},
    "dec4_diagnostic": {"diagnostics": ["template_share"]},
    "dec4_wrapper": {"filters": ["wrapped_none"]},
}
REPO = Path(__file__).resolve().parents[2]


def forget_packages() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in PACKAGES:
            del sys.modules[name]


@pytest.fixture
def dec4(monkeypatch: pytest.MonkeyPatch) -> None:
    """The six packages installed (on sys.path with their metadata), autoload on, only
    they allowed, each imported afresh."""
    monkeypatch.syspath_prepend(str(DEC4))
    monkeypatch.delenv("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("MIRAGE_PLUGINS", ",".join(PACKAGES))
    monkeypatch.setattr(manager, "shown_notices", set())  # as in a fresh process
    forget_packages()
    yield
    forget_packages()


def loaded() -> tuple[object, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plugins = build_plugins()
    return plugins, [w for w in caught if issubclass(w.category, MirageDeprecationWarning)]


def test_each_loads_unedited_with_one_deprecation_warning_naming_the_public_module(dec4):
    plugins, caught = loaded()
    assert plugins.failed == []
    for name, components in PACKAGES.items():
        info = plugins.info(name)
        assert info.components == components
        assert info.api == 1  # built with 4 December's constructors
        mine = [str(w.message) for w in caught if str(w.message).startswith(f"plugin {name!r}")]
        assert len(mine) == 1, (name, mine)
        assert "import from mirage.plugin instead" in mine[0] and "mirage.core." in mine[0]
        assert info.deprecated == mine[0]
    assert len(caught) == len(PACKAGES)  # the old paths' own import warnings are folded in


def test_the_old_paths_are_todays_objects(dec4):
    build_plugins()
    import dec4_filter
    from mirage.plugin import Filter, Selection

    assert dec4_filter.Filter is Filter and dec4_filter.Selection is Selection


def turn(reward: float) -> Turn:
    return Turn(context="X", response="Z </think> <answer> 1 </answer>", reasoning="Z", answer="1",
                actions=["1"], format_ok=True, reward=reward, context_ids=[1], response_ids=[2])


def batch_of(returns: list[list[float]]) -> Batch:
    groups = [Group(i, 100 + i, [Trajectory(i, k, 0, turns=[turn(r)]) for k, r in enumerate(rs)])
              for i, rs in enumerate(returns)]
    return Batch(step=1, groups=groups, temperature=1.0)


RETURNS = [[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1], [0, 1, 1, 1], [0, 0, 0, 0]]


@pytest.mark.parametrize("rho", [0.2, 0.5, 0.9, 1.0])
def test_the_filter_keeps_what_it_kept_on_december_4(dec4, rho):
    plugins = build_plugins()
    config = build_config({**TINY, "env": {"name": "frozenlake"}, "filter": {"name": "best_mean", "rho": rho}},
                          plugins)
    component = build_component(config, plugins.registries, "filter", "best_mean")
    assert component.config is config.filter  # the FilterConfig, as it was built then
    means = [sum(r) / len(r) for r in RETURNS]
    count = max(1, math.ceil(rho * len(RETURNS)))
    expected = sorted(sorted(range(len(RETURNS)), key=lambda i: (-means[i], i))[:count])
    assert component.select(batch_of(RETURNS)).kept_groups == expected


def test_the_duck_typed_filter_reads_its_options_from_the_filter_config(dec4):
    plugins = build_plugins()
    config = build_config({**TINY, "env": {"name": "frozenlake"},
                           "filter": {"name": "duck_spread", "rho": 0.7, "options": {"min_spread": 0.5}}}, plugins)
    component = build_component(config, plugins.registries, "filter", "duck_spread")
    assert (component.min_spread, component.shared_rho) == (0.5, 0.7)
    assert component.select(batch_of(RETURNS)).kept_groups == [0, 2, 3]  # spread 1 > 0.5; the others 0


def test_a_run_with_the_environment_the_duck_filter_the_diagnostic_and_the_wrapper(dec4, tmp_path):
    plugins = build_plugins()
    import dec4_wrapper

    assert dec4_wrapper.CALLS and "wrapped_none" in plugins.registries.filters
    config = build_config({**TINY, "env": {"name": "dec4_difference"}, "steps": 2,
                           "filter": {"name": "duck_spread"},
                           "diagnostics": {**TINY["diagnostics"], "names": ["template_share"]}}, plugins)
    db = tmp_path / "runs.duckdb"
    run_id = execute(config, db, plugins=plugins, progress=False)
    store = RunStore(db)
    assert store.get_run(run_id)["status"] == "finished"
    shares = store.metrics(run_id, "template/share")
    assert [step for step, _, _ in shares] == [0, 1, 2] and all(0 < value <= 1 for _, _, value in shares)
    assert {name for _, name, _ in store.metrics(run_id)} >= {"val/success", "filter/kept_ratio"}


def test_the_rule_breaking_filter_stops_the_run_naming_its_plugin(dec4, tmp_path):
    plugins = build_plugins()
    config = build_config({**TINY, "env": {"name": "frozenlake"}, "steps": 1,
                           "filter": {"name": "out_of_range"}}, plugins)
    with pytest.raises(Exception, match="dec4_rule_breaker") as raised:
        execute(config, tmp_path / "runs.duckdb", plugins=plugins, progress=False)
    assert "out_of_range" in str(raised.value)


def test_core_plugins_lists_them_with_their_notice_and_warns_once_each(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(DEC4), "MIRAGE_PLUGINS": ",".join(PACKAGES)}
    env.pop("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", None)
    done = subprocess.run([sys.executable, "-m", "mirage", "plugins"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "FAILED" not in done.stdout
    for name in PACKAGES:
        assert f"{name} 0.1.0" in done.stdout
        notices = [line for line in done.stderr.splitlines()
                   if f"MirageDeprecationWarning: plugin {name!r}" in line]
        assert len(notices) == 1, (name, done.stderr)
    assert done.stdout.count("  deprecated: plugin ") == len(PACKAGES)

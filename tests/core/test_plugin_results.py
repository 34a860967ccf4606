"""Strict checks on what plugins return (mirage/core/plugin_api/results.py): malformed
selections and metrics are refused with one line naming the plugin and the value, and a
whole run stops on them as ``failed`` with the earlier steps kept."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from mirage.core.cli.program import app
from mirage.core.config.run_config import RunConfig
from mirage.core.errors import PluginResultError
from mirage.core.plugin_api.components import Diagnostic, Filter
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.plugin_api.results import CheckedMetrics, check_metrics, check_selection
from mirage.core.rl.batch import Batch, Selection, make_batch
from mirage.core.run import loop
from mirage.core.run.loop import execute
from mirage.core.run.stages import diagnose
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore


def batch(prompts: int = 3, group_size: int = 4) -> Batch:
    return make_batch(1, list(range(prompts)), group_size, temperature=1.0)


@pytest.mark.parametrize("selection, problem", [
    (Selection([-1]), "kept_groups[0] = -1 is out of range 0..2"),
    (Selection([0, 3]), "kept_groups[1] = 3 is out of range 0..2"),
    (Selection([1, 1]), "kept_groups[1] = 1 is a duplicate"),
    (Selection([1.0]), "kept_groups[0] = 1.0 is not an integer"),
    (Selection([True]), "kept_groups[0] = True is not an integer"),
    (Selection({0, 1}), "kept_groups is not a list: {0, 1}"),
    (Selection([0], {0: [4]}), "kept_samples[0][0] = 4 is out of range 0..3"),
    (Selection([0], {0: [-1]}), "kept_samples[0][0] = -1 is out of range 0..3"),
    (Selection([0], {0: [2, 2]}), "kept_samples[0][1] = 2 is a duplicate"),
    (Selection([0], {1: [0]}), "kept_samples has key 1, which is not one of the kept groups [0]"),
    ([0, 1], "expected a Selection, got [0, 1]"),
])
def test_a_bad_selection_is_refused_naming_the_value(selection, problem):
    with pytest.raises(PluginResultError) as info:
        check_selection(selection, batch(), "filter 'x' (plugin 'p')")
    assert str(info.value) == f"filter 'x' (plugin 'p') returned an invalid selection at step 1: {problem}"


def test_good_selections_pass():
    for selection in (Selection([]), Selection([2, 0]), Selection((1,), {1: [3, 0]}),
                      Selection([0, 1, 2], metrics={"filter/kept_ratio": 1, "x/y": np.float32(0.5)})):
        check_selection(selection, batch(), "filter 'x' (plugin 'p')")


@pytest.mark.parametrize("metrics, problem", [
    ({"update/loss": math.inf}, "update/loss = inf is not finite"),
    ({"update/loss": -math.inf}, "update/loss = -inf is not finite"),
    ({"update/loss": "0.5"}, "update/loss = '0.5' is not a number"),
    ({"update/loss": None}, "update/loss = None is not a number"),
    ({"update/loss": True}, "update/loss = True is not a number"),
    ({"update/loss": [1.0]}, "update/loss = [1.0] is not a number"),
    ({"bad name": 1.0}, "name 'bad name' is not well formed"),
    ({"update//loss": 1.0}, "name 'update//loss' is not well formed"),
    ({"/loss": 1.0}, "name '/loss' is not well formed"),
    ({3: 1.0}, "name 3 is not well formed"),
])
def test_a_bad_metric_is_refused_naming_the_value(metrics, problem):
    with pytest.raises(PluginResultError) as info:
        check_metrics(metrics, "algorithm 'a' (plugin 'p')", 7)
    message = str(info.value)
    assert message.startswith(f"algorithm 'a' (plugin 'p') returned a bad metric at step 7: {problem}")
    assert "\n" not in message


def test_metrics_that_are_numbers_or_undefined_pass():
    check_metrics({"mi/first_turn/recall@2": 0.5, "filter/rv_cv": math.nan, "update/steps": 3,
                   "grad/q1/task/total": np.float64(1e300)}, "diagnostic 'd' (plugin 'p')", 1)
    check_metrics(None, "algorithm 'a' (plugin 'p')", 1)
    with pytest.raises(PluginResultError, match="returned metrics that are not a mapping at step 1: 0.5"):
        check_metrics(0.5, "algorithm 'a' (plugin 'p')", 1)


class InfiniteHook:
    """A plugin whose own ``mirage_diagnose`` returns an infinite metric."""

    @hookimpl
    def mirage_diagnose(self, run, batch):
        return {"hook/score": math.inf}


def test_each_diagnose_result_is_checked_once_naming_who_measured_it():
    """The built-in diagnose stage checks each diagnostic's metrics as it measures them,
    naming the diagnostic, and hands back a CheckedMetrics, which is not checked again;
    another plugin's ``mirage_diagnose`` result is checked by the diagnose stage."""
    check_metrics(CheckedMetrics({"bad/score": math.inf}), "diagnostic 'd' (plugin 'p')", 1)
    loaded = build_plugins(extra=[("infinite_hook", InfiniteHook())])
    run = SimpleNamespace(hook=loaded.hook, plugins=loaded, config=RunConfig(), step=1, diagnostics={})
    with pytest.raises(PluginResultError) as info:
        diagnose(run, batch())
    assert str(info.value) == ("mirage_diagnose of plugin 'infinite_hook' returned a bad metric at "
                               "step 1: hook/score = inf is not finite")


# --------------------------------------------------------------------------- in whole runs


class NegativeFilter(Filter):
    """Keeps every group at step 1 and group -1 (the last one, silently, if unchecked) later."""

    def select(self, batch: Batch) -> Selection:
        return Selection(list(range(len(batch.groups))) if batch.step < 2 else [-1])


class InfiniteDiagnostic(Diagnostic):
    """A diagnostic whose second measurement is infinite."""

    def __init__(self, config, options):
        super().__init__(config, options)
        self.calls = 0

    def due(self, step: int) -> bool:
        return True

    def measure(self, run, batch: Batch) -> dict[str, float]:
        self.calls += 1
        return {"bad/score": math.inf if batch.step >= 2 else 1.0}


@pytest.fixture
def bad_plugins(make_plugins):
    return make_plugins("bad_plugin", filters={"negative": NegativeFilter},
                             diagnostics={"infinite": InfiniteDiagnostic})


@pytest.mark.slow
@pytest.mark.parametrize("section, value, message", [
    ("filter", {"name": "negative"},
     "filter 'negative' (plugin 'bad_plugin') returned an invalid selection at step 2: "
     "kept_groups[0] = -1 is out of range 0..1"),
    ("diagnostics", {"names": ["infinite"]},
     "diagnostic 'infinite' (plugin 'bad_plugin') returned a bad metric at step 2: bad/score = inf is not finite"),
])
def test_a_bad_result_fails_the_run_and_keeps_earlier_steps(bad_plugins, tiny_config, tmp_path,
                                                             section, value, message):
    data = tiny_config()
    data[section] = value
    data["steps"] = 3
    db = tmp_path / "runs.duckdb"
    with pytest.raises(PluginResultError) as info:
        execute(build_config(data), db, plugins=bad_plugins, progress=False)
    assert str(info.value) == message
    store = RunStore(db)
    (row,) = store.list_runs()
    assert row["status"] == "failed" and message in row["error"]
    assert sorted({step for step, _, _ in store.metrics(row["run_id"])}) == [0, 1]


def test_cli_reports_a_bad_result_in_one_line(monkeypatch, tiny_config_file, tmp_path):
    message = ("filter 'negative' (plugin 'bad_plugin') returned an invalid selection at step 2: "
               "kept_groups[0] = -1 is out of range 0..1")

    def failing_execute(*args, **kwargs):
        raise PluginResultError(message)

    monkeypatch.setattr(loop, "execute", failing_execute)
    result = CliRunner().invoke(app, ["run", "--config", str(tiny_config_file), "--quiet",
                                      "--db", str(tmp_path / "runs.duckdb")])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [f"failed: {message}"]

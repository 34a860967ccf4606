"""Filters from other plugins in whole runs (mirage/core/run/loop.py): a filter that raises
stops the run with an error naming its plugin and the file and line that raised (and
so does a diagnostic; the run's events keep the traceback), a filter that keeps nothing stops it
after ``max_empty_steps``, the loop's loss scale reaches the update, and the installed
example package works through the real ``core run --filter best_half``.

Throwaway plugins are registered with ``build_plugins(extra=...)`` (conftest's
``make_plugins``) and passed to ``execute``; every run uses the tiny config from conftest.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mirage.core.cli.program import app
from mirage.core.plugin_api.blame import PluginError, Suspect, culprit
from mirage.core.plugin_api.components import Diagnostic, Filter
from mirage.core.rl.batch import Batch, Selection
from mirage.core.run import loop
from mirage.core.run.loop import EmptyStepsError, execute
from mirage.core.run.stages import FilterError
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore


class BoomFilter(Filter):
    """Keeps everything at step 1, raises from step 2 on."""

    def select(self, batch: Batch) -> Selection:
        if batch.step >= 2:
            raise ValueError("selection exploded")
        return Selection(list(range(len(batch.groups))))


class NothingFilter(Filter):
    """Keeps no group."""

    def select(self, batch: Batch) -> Selection:
        return Selection([])


class FirstFilter(Filter):
    """Keeps group 0 only."""

    def select(self, batch: Batch) -> Selection:
        return Selection([0])


@pytest.fixture
def boom_plugins(make_plugins):
    return make_plugins("boom_plugin",
                        filters={"boom": BoomFilter, "nothing": NothingFilter, "first": FirstFilter})


def metric_table(store: RunStore, run_id: str) -> dict[tuple[int, str], float]:
    return {(step, name): value for step, name, value in store.metrics(run_id)}


# --------------------------------------------------------------------------- a filter that raises


@pytest.mark.slow
def test_a_raising_filter_fails_the_run_naming_its_plugin(boom_plugins, tiny_config, tmp_path):
    data = tiny_config()
    data["filter"] = {"name": "boom"}
    data["steps"] = 3
    db = tmp_path / "runs.duckdb"
    with pytest.raises(FilterError) as info:
        execute(build_config(data), db, plugins=boom_plugins, progress=False)
    message = str(info.value)
    assert "'boom'" in message and "'boom_plugin'" in message
    assert "step 2" in message and "ValueError: selection exploded" in message
    assert isinstance(info.value.__cause__, ValueError)

    store = RunStore(db)
    (row,) = store.list_runs()
    assert row["status"] == "failed"
    assert "boom_plugin" in row["error"] and "'boom'" in row["error"]
    assert "selection exploded" in row["error"]
    # steps 0 and 1 finished and stay; step 2 never was written
    assert sorted({step for step, _, _ in store.metrics(row["run_id"])}) == [0, 1]
    assert [g["kept"] for g in store.groups(row["run_id"], step=1)] == [True, True]


def load_module(path, monkeypatch):
    """Import the throwaway plugin module at ``path``, gone from sys.modules after the test."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, path.stem, module)
    spec.loader.exec_module(module)
    return module


BAD_FILTERS = """\
from mirage.core.plugin_api.components import Filter
from mirage.core.rl.batch import Selection


def explode(step):
    raise ValueError(f"selection exploded at {step}")


class BoomFilter(Filter):
    def select(self, batch):
        if batch.step >= 2:
            explode(batch.step)
        return Selection(list(range(len(batch.groups))))
"""


@pytest.mark.slow
def test_cli_names_the_plugin_file_and_line_and_stores_the_traceback(
        monkeypatch, make_plugins, tiny_config_file, tmp_path):
    source = tmp_path / "plugin" / "bad_filters.py"
    source.parent.mkdir()
    source.write_text(BAD_FILTERS)
    lines = BAD_FILTERS.splitlines()
    raise_line = lines.index('    raise ValueError(f"selection exploded at {step}")') + 1
    call_line = lines.index("            explode(batch.step)") + 1
    bad_filters = load_module(source, monkeypatch)
    monkeypatch.setattr(loop, "build_plugins",
                        lambda: make_plugins("bad_filters", filters={"boom": bad_filters.BoomFilter}))
    db = tmp_path / "runs.duckdb"
    result = CliRunner().invoke(app, ["run", "--config", str(tiny_config_file), "--quiet", "--filter", "boom",
                                      "--steps", "2", "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [
        f"failed: filter 'boom' (plugin 'bad_filters') raised during selection at step 2, "
        f"at {source}:{raise_line}: ValueError: selection exploded at 2"
    ]
    (row,) = RunStore(db).list_runs()
    assert row["status"] == "failed" and f"{source}:{raise_line}" in row["error"]
    (event,) = [e for e in RunStore(db).events(row["run_id"]) if e["kind"] == "error"]
    assert event["step"] == 2
    message = event["message"]
    assert message.startswith("filter 'boom' (plugin 'bad_filters') raised during selection")
    assert "Traceback (most recent call last)" in message
    # the whole chain: the filter stage's call, the filter's select, the helper that raised
    assert "mirage/core/run/stages.py" in message
    assert f'File "{source}", line {call_line}, in select' in message
    assert f'File "{source}", line {raise_line}, in explode' in message
    assert message.rstrip().endswith("ValueError: selection exploded at 2")


def test_a_frame_deeper_than_the_plugin_is_not_blamed(tmp_path, monkeypatch):
    """An error raised inside the standard library is placed at the plugin's call."""
    source = tmp_path / "parsing_plugin.py"
    source.write_text("import json\n\n\ndef parse(text):\n    return json.loads(text)\n")
    parsing_plugin = load_module(source, monkeypatch)
    suspects = [Suspect("mirage_rollout of plugin 'mirage.rollout'", "mirage.plugins.rollout"),
                Suspect("filter 'parse' (plugin 'parsing')", "parsing_plugin")]
    with pytest.raises(json.JSONDecodeError) as info:
        parsing_plugin.parse("{")
    assert "json" in info.traceback[-1].path.parts  # the deepest frame is json's own
    found, file, line = culprit(info.value, suspects)
    assert (found.source, file, line) == ("filter 'parse' (plugin 'parsing')", str(source), 5)
    assert culprit(info.value, suspects[:1]) is None


class CrashingDiagnostic(Diagnostic):
    """Measures step 0, raises from step 1 on."""

    def due(self, step: int) -> bool:
        return True

    def measure(self, run, batch: Batch) -> dict[str, float]:
        if batch.step >= 1:
            raise RuntimeError("measurement crashed")  # CRASH LINE
        return {"crash/ok": 1.0}


@pytest.mark.slow
def test_every_stage_names_the_plugin_code_that_raised(make_plugins, tiny_config, tmp_path):
    """Not only filters: a diagnostic's exception reaches the stage through the built-in
    ``mirage_diagnose`` hook and is still blamed on the diagnostic's own line."""
    plugins = make_plugins("crash_plugin", diagnostics={"crash": CrashingDiagnostic})
    data = tiny_config()
    data["diagnostics"] = {"names": ["crash"]}
    data["steps"] = 2
    db = tmp_path / "runs.duckdb"
    with pytest.raises(PluginError) as info:
        execute(build_config(data), db, plugins=plugins, progress=False)
    line = next(number for number, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.endswith("# CRASH LINE"))
    assert str(info.value) == (
        f"diagnostic 'crash' (plugin 'crash_plugin') raised during diagnosis at step 1, at "
        f"{__file__}:{line}: RuntimeError: measurement crashed")
    store = RunStore(db)
    (row,) = store.list_runs()
    (event,) = [e for e in store.events(row["run_id"]) if e["kind"] == "error"]
    assert "in measure" in event["message"] and "RuntimeError: measurement crashed" in event["message"]


def test_cli_reports_a_filter_failure_in_one_line(monkeypatch, tiny_config_file, tmp_path):
    def failing_execute(*args, **kwargs):
        raise FilterError("filter 'boom' (plugin 'boom_plugin') raised during selection at step 2: "
                          "ValueError: selection exploded")

    monkeypatch.setattr(loop, "execute", failing_execute)
    result = CliRunner().invoke(app, ["run", "--config", str(tiny_config_file), "--quiet",
                                      "--db", str(tmp_path / "runs.duckdb")])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "failed: filter 'boom' (plugin 'boom_plugin') raised during selection at step 2: "
        "ValueError: selection exploded"
    ]


# --------------------------------------------------------------------------- empty kept sets


@pytest.mark.slow
def test_empty_steps_skip_the_update_and_stop_the_run(boom_plugins, tiny_config, tmp_path):
    data = tiny_config()
    data["filter"], data["max_empty_steps"] = {"name": "nothing"}, 2
    data["steps"] = 5
    db = tmp_path / "runs.duckdb"
    with pytest.raises(EmptyStepsError, match="'nothing' kept no group for 2 steps in a row"):
        execute(build_config(data), db, plugins=boom_plugins, progress=False)
    store = RunStore(db)
    (row,) = store.list_runs()
    assert row["status"] == "stopped"
    table = metric_table(store, row["run_id"])
    assert sorted({step for step, _ in table}) == [0, 1, 2]
    assert [table[(s, "filter/empty_streak")] for s in (1, 2)] == [1.0, 2.0]
    assert all(table[(s, "filter/kept_groups")] == 0.0 for s in (1, 2))
    assert not any(name.startswith("update/") for _, name in table), "an empty step was trained on"
    assert [e["step"] for e in store.events(row["run_id"]) if e["kind"] == "stopped"] == [2]


# --------------------------------------------------------------------------- loss scaling


@pytest.mark.slow
def test_loss_scale_is_recorded_and_reaches_the_update(boom_plugins, tiny_config, tmp_path,
                                                       monkeypatch):
    data = tiny_config()
    # keep 1 of P = 2 groups: sqrt(1/2) * rho 0.5
    data["filter"] = {"name": "first", "rho": 0.5}
    data |= {"loss_scaling": "sqrt", "step_size_matching": True}
    data["steps"] = 2
    db = tmp_path / "runs.duckdb"
    seen: list[float] = []
    algo_cls = boom_plugins.registries.algorithms.get("grpo")
    original = algo_cls.update

    def spy(self, run, batch):
        seen.append(batch.loss_scale)
        return original(self, run, batch)

    monkeypatch.setattr(algo_cls, "update", spy)
    run_id = execute(build_config(data), db, plugins=boom_plugins, progress=False)
    table = metric_table(RunStore(db), run_id)
    expected = math.sqrt(0.5) * 0.5
    assert seen == pytest.approx([expected, expected])
    for step in (1, 2):
        assert table[(step, "filter/loss_scale")] == pytest.approx(expected)
        assert table[(step, "filter/kept_groups")] == 1.0
        assert table[(step, "filter/kept_trajectories")] == 4.0  # G = 4
        assert table[(step, "update/trajectories")] == 4.0


# --------------------------------------------------------------------------- the example package


@pytest.mark.slow
@pytest.mark.plugin_autoload
def test_core_run_with_the_installed_example_filter(cli, tiny_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--quiet",
                         "--filter", "best_half", "--steps", "1")
    assert code == 0, err
    run_id = re.search(r"run (\S+) finished", out).group(1)
    store = RunStore(db)
    row = store.get_run(run_id)
    assert row["status"] == "finished"
    assert row["config"]["filter"]["name"] == "best_half"
    assert {"name": "example_filter", "version": "0.1.0"} in row["plugins"]
    assert sum(g["kept"] for g in store.groups(run_id, step=1)) == 1  # ceil(2 / 2)

"""The logger plugins (mirage/plugins/loggers, docs/loggers.md) against the real libraries.

One tiny run logs to W&B (offline), MLflow (its default local SQLite store) and
TensorBoard at once; each tracker is then read back through its own reader and must hold
exactly the store's metrics of every step:

* W&B: ``wandb leet inspect --json RUN_DIR``, W&B's own command that prints the records
  of an offline run's ``.wandb`` transaction log (its ``history`` records are the
  logged steps); offline runs have no other reader without a server;
* MLflow: ``MlflowClient.get_metric_history`` on the tracking URI;
* TensorBoard: ``EventAccumulator`` on the run's event folder.

The run hooks themselves (failure isolation, what they receive) are tested with
throwaway plugins beside the built-ins.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict
from shared_builds import build_once, built_data

from mirage.core.config.run_config import RunConfig, config_hash
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.components import Logger
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config, validate_config
from mirage.core.store.run_store import RunStore
from mirage.plugins.loggers.mlflow_logger import MlflowLogger, mlflow_name

# real (tiny) runs; one worker for the module, so no test waits on another worker's
# build of the shared logged run (build_once)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("logged-run")]

Table = dict[tuple[int, str], float]


def store_table(db: Path, run_id: str) -> Table:
    return {(step, name): value for step, name, value in RunStore(db).metrics(run_id)}


def quiet_trackers(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """No network, no prompts, nothing written outside ``home``."""
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
                        "WANDB_CONFIG_DIR": home / "config", "WANDB_CACHE_DIR": home / "cache",
                        "WANDB_DATA_DIR": home / "data"}.items():
        monkeypatch.setenv(name, str(value))


@pytest.fixture(scope="session")
def logged_run(tmp_path_factory, mirage_cache, tiny_config):
    """(store path, run id) of one tiny run logged to all three built-in loggers, run once
    per test run (the xdist workers share it: conftest's ``build_once``; read-only)."""
    def run(root: Path) -> str:
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("MIRAGE_CACHE", str(mirage_cache))
            monkeypatch.setenv("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", "1")
            quiet_trackers(monkeypatch, root / "home")
            data = tiny_config() | {"loggers": {"names": ["wandb", "mlflow", "tensorboard"]}}
            return execute(build_config(data), root / "store" / "runs.duckdb", progress=False)

    root = build_once(tmp_path_factory, "logged-run", run)
    return root / "store" / "runs.duckdb", built_data(root)


def test_the_logged_run_finished_without_logger_events(logged_run):
    db, run_id = logged_run
    store = RunStore(db)
    assert store.get_run(run_id)["status"] == "finished"
    assert [e for e in store.events(run_id) if e["kind"] == "logger"] == []
    steps = {step for step, _ in store_table(db, run_id)}
    assert steps == set(range(5))  # steps 0-4: what every tracker must hold


def test_wandb_offline_history_equals_the_store(logged_run):
    db, run_id = logged_run
    [run_dir] = (db.parent / "wandb").glob(f"offline-run-*-{run_id}")
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
                          capture_output=True, text=True, timeout=120, check=True)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    logged: Table = {}
    for record in records:
        if record["type"] == "history":
            item = record["history"]["item"]
            logged |= {(item["_step"], name): value for name, value in item.items()
                       if not name.startswith("_")}  # _step, _runtime, _timestamp: W&B's own
    assert logged == store_table(db, run_id)
    [run_record] = [r["run"] for r in records if r["type"] == "run"]
    assert run_record["run_id"] == run_id
    assert run_record["config"]["update"]["loggers"]["names"] == ["wandb", "mlflow", "tensorboard"]


def test_mlflow_history_equals_the_store(logged_run):
    from mlflow.tracking import MlflowClient

    db, run_id = logged_run
    client = MlflowClient(tracking_uri=f"sqlite:///{db.parent.resolve() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("mirage")
    [run] = client.search_runs([experiment.experiment_id], f"tags.`mirage.run_id` = '{run_id}'")
    assert run.info.status == "FINISHED"
    assert run.data.params["rollout.group_size"] == "4"
    expected = store_table(db, run_id)
    logged: Table = {}
    for name in {name for _, name in expected}:
        logged |= {(m.step, name): m.value
                   for m in client.get_metric_history(run.info.run_id, mlflow_name(name))}
    assert logged == expected


def test_tensorboard_events_equal_the_store(logged_run):
    from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    db, run_id = logged_run
    events = EventAccumulator(str(db.parent / "tensorboard" / run_id), size_guidance={TENSORS: 0})
    events.Reload()
    logged: Table = {}
    for tag in events.Tags()["tensors"]:
        if events.SummaryMetadata(tag).plugin_data.plugin_name == "scalars":
            logged |= {(e.step, tag): make_ndarray(e.tensor_proto).item() for e in events.Tensors(tag)}
    assert logged == store_table(db, run_id)


def test_mlflow_file_store_resume_continues_the_run(tmp_path, monkeypatch):
    """MLflow's file store (in maintenance mode: it needs MLFLOW_ALLOW_FILE_STORE) works
    too, and a resumed run logs into the MLflow run it started."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    options = MlflowLogger.Options(tracking_uri=uri, experiment="files")
    first = MlflowLogger(RunConfig(), options)
    first.open("r1", RunConfig(), tmp_path, 0)
    first.log(0, {"mi/first_turn/recall@2": 0.25, "train/success": 0.5})
    first.close("stopped")
    again = MlflowLogger(RunConfig(), options)
    again.open("r1", RunConfig(), tmp_path, 1)
    again.log(1, {"train/success": 0.75})
    again.close("finished")
    client = MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("files").experiment_id])
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "train/success")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 0.75)]
    assert run.data.metrics == {"mi/first_turn/recall_at_2": 0.25, "train/success": 0.75}


# --------------------------------------------------------------------------- the hooks


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Recording(Logger):
    """A logger component that keeps what it was given (in the class: the run builds it)."""

    Options = NoOptions
    calls: list[tuple] = []

    def open(self, run_id, config, store_dir, first_step):
        Recording.calls.append(("open", run_id, store_dir, first_step))

    def log(self, step, metrics):
        Recording.calls.append(("log", step, dict(metrics)))

    def close(self, status):
        Recording.calls.append(("close", status))


class Failing(Logger):
    """A logger component whose tracker goes away at step 2."""

    Options = NoOptions

    def open(self, run_id, config, store_dir, first_step):
        pass

    def log(self, step, metrics):
        if step == 2:
            raise ConnectionError("tracker unreachable")

    def close(self, status):
        raise AssertionError("a dropped logger is not closed")


class Observer:
    """A plugin implementing the run hooks directly; ``fail_at`` makes its step hook raise."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.calls: list[tuple] = []

    @hookimpl
    def mirage_run_start(self, run_id, first_step):
        self.calls.append(("start", run_id, first_step))

    @hookimpl
    def mirage_step_end(self, run_id, step, metrics):
        if step == self.fail_at:
            raise RuntimeError("observer broke")
        self.calls.append(("step", step, dict(metrics)))

    @hookimpl
    def mirage_run_end(self, run_id, status, message):
        self.calls.append(("end", status, message))


def test_run_hooks_see_the_store_and_a_failing_logger_loses_nothing(tiny_config, tmp_path, make_plugins):
    Recording.calls = []
    watcher, broken = Observer(), Observer(fail_at=1)
    plugins = make_plugins("throwaway_loggers", loggers={"recording": Recording, "failing": Failing})
    plugins.manager.register(watcher, name="watcher")
    plugins.manager.register(broken, name="broken")
    data = tiny_config() | {"steps": 3, "loggers": {"names": ["failing", "recording"]}}
    db = tmp_path / "store" / "runs.duckdb"
    run_id = execute(build_config(data), db, plugins=plugins, progress=False)

    store = RunStore(db)
    assert store.get_run(run_id)["status"] == "finished"
    by_step: dict[int, dict[str, float]] = {}
    for (step, name), value in store_table(db, run_id).items():
        by_step.setdefault(step, {})[name] = value
    assert by_step[2]["val/success"] >= 0  # validation is part of what the hooks see
    logged = [("log", step, metrics) for step, metrics in sorted(by_step.items())]
    assert Recording.calls == [("open", run_id, store.path.parent, 0), *logged, ("close", "finished")]
    assert watcher.calls == [("start", run_id, 0), *[("step", s, m) for _, s, m in logged],
                             ("end", "finished", None)]
    assert broken.calls == [("start", run_id, 0), ("step", 0, by_step[0])]  # skipped after step 1
    messages = [e["message"] for e in store.events(run_id) if e["kind"] == "logger"]
    assert len(messages) == 2
    assert any("logger 'failing' (plugin 'throwaway_loggers') raised at step 2: ConnectionError: "
               "tracker unreachable" in m for m in messages)
    assert any("mirage_step_end of plugin 'broken' raised at step 1: RuntimeError" in m for m in messages)


class BrokenRollout:
    @hookimpl(tryfirst=True)
    def mirage_rollout(self, run, batch):
        raise RuntimeError("rollout exploded")


def test_run_end_reports_a_failed_run(tiny_config, tmp_path, make_plugins):
    Recording.calls = []
    plugins = make_plugins("throwaway_loggers", loggers={"recording": Recording})
    plugins.manager.register(BrokenRollout(), name="broken_rollout")
    data = tiny_config() | {"loggers": {"names": ["recording"]}}
    with pytest.raises(RuntimeError, match="rollout exploded"):
        execute(build_config(data), tmp_path / "runs.duckdb", plugins=plugins, progress=False)
    assert [call[0] for call in Recording.calls] == ["open", "close"]
    assert Recording.calls[-1] == ("close", "failed")


# --------------------------------------------------------------------------- validation


def test_unknown_logger_is_refused_listing_the_valid_ones(cli, tiny_config_file, tmp_path):
    db = tmp_path / "store" / "runs.duckdb"
    code, _, err = cli("run", "--config", tiny_config_file, "--db", db, "--logger", "wandbb")
    assert code == 2
    assert err.strip() == "error: unknown logger 'wandbb'; valid: mlflow, tensorboard, wandb"
    assert not db.exists()


def test_a_logger_without_its_library_fails_before_the_run(monkeypatch, tiny_config):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    config = build_config(tiny_config() | {"loggers": {"names": ["mlflow"]}})
    with pytest.raises(ConfigError) as caught:
        validate_config(config, build_plugins())
    assert str(caught.value) == "logger 'mlflow': needs the mlflow package: pip install 'mirage-rl[mlflow]'"


def test_logger_options_are_checked_by_the_logger(tiny_config):
    config = build_config(tiny_config() | {"loggers": {"options": {"wandb": {"mode": "sometimes"}}}})
    with pytest.raises(ConfigError, match=r"^invalid loggers\.options\.wandb\.mode: Input should be "):
        validate_config(config, build_plugins())


def test_loggers_do_not_change_a_runs_identity():
    plain = build_config({})
    logged = build_config({"loggers": {"names": ["wandb"], "options": {"wandb": {"project": "x"}}}})
    assert plain.run_hash() == logged.run_hash()
    assert config_hash(logged.model_dump(mode="json")) == plain.run_hash()

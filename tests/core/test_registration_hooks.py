"""Every registration hook and the filter and update stage hooks, each exercised by one
throwaway plugin: the components it registers are listed under it, and one tiny run uses
all of them (an environment, an algorithm, a diagnostic and a logger of its own, and
wrappers around the built-in filter and update stages)."""

from __future__ import annotations

import copy
import json

import pytest
from pydantic import BaseModel, ConfigDict

from mirage.core.config.presets import TINY
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.components import Algorithm, Diagnostic, Logger
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.loop import execute
from mirage.core.run.validate import parse_config, validate_config
from mirage.core.store.run_store import RunStore
from mirage.envs.frozenlake import FrozenLake

STEPS = 2


class ThrowawayLake(FrozenLake):
    """FrozenLake's rules under a name of the throwaway plugin's own."""

    name = "throwaway_lake"


class CountKept(Algorithm):
    """Trains nothing; reports how many groups the filter kept."""

    def update(self, run, batch):
        return {"count/kept_groups": float(len(batch.kept_groups()))}


class NeedsBigGroups(CountKept):
    @classmethod
    def config_problem(cls, config, backend_cls):
        if config.rollout.group_size < 8:
            return f"needs_big_groups wants group size >= 8 (got {config.rollout.group_size})"
        return None


class GroupCount(Diagnostic):
    """Counts the batch's groups on the default schedule; its review doubles the count."""

    def measure(self, run, batch):
        return {"groups/count": float(len(batch.groups))}

    def review(self, run, metrics):
        return {"groups/doubled": 2 * metrics["groups/count"]} if "groups/count" in metrics else {}


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Collect(Logger):
    """Keeps what it is given (in the class: the run builds the instance)."""

    Options = NoOptions
    calls: list[tuple] = []

    def open(self, run_id, config, store_dir, first_step):
        Collect.calls.append(("open", first_step))

    def log(self, step, metrics):
        Collect.calls.append(("log", step, dict(metrics)))

    def close(self, status):
        Collect.calls.append(("close", status))


class Throwaway:
    """A plugin object registering one component of each kind but backends (the local
    backend trains the policy) and wrapping the filter and update stages."""

    __version__ = "0.0.1"

    def __init__(self):
        self.selections: list[list[int]] = []

    @hookimpl
    def mirage_register_envs(self, register):
        register("throwaway_lake", ThrowawayLake)

    @hookimpl
    def mirage_register_algorithms(self, register):
        register("count_kept", CountKept)
        register("needs_big_groups", NeedsBigGroups)

    @hookimpl
    def mirage_register_diagnostics(self, register):
        register("groups", GroupCount)

    @hookimpl
    def mirage_register_loggers(self, register):
        register("collect", Collect)

    @hookimpl(wrapper=True)
    def mirage_filter(self, run, batch):
        selection = yield
        self.selections.append(list(selection.kept_groups))
        return selection

    @hookimpl(wrapper=True)
    def mirage_update(self, run, batch):
        metrics = yield
        return {**metrics, "throwaway/updated": 1.0}


def throwaway_config(**algorithm):
    data = copy.deepcopy(TINY) | {"env": {"name": "throwaway_lake"}, "steps": STEPS,
                                  "loggers": {"names": ["collect"]}}
    data["algorithm"] = {"name": "count_kept", **algorithm}
    data["diagnostics"] = {"names": ["reward", "groups"], "every": 1}
    data["filter"] = {"name": "none"}
    return parse_config(data)  # resolved against the throwaway plugin's registries when validated


@pytest.fixture
def plugin():
    return Throwaway()


@pytest.fixture
def plugins(plugin):
    return build_plugins(extra=[("throwaway", plugin)])


@pytest.fixture
def run(plugins, plugin, tmp_path):
    """One tiny run through every throwaway component: (store, run id)."""
    Collect.calls.clear()
    db = tmp_path / "runs.duckdb"
    run_id = execute(throwaway_config(), db, plugins=plugins, progress=False)
    return RunStore(db), run_id


def stored(store: RunStore, run_id: str) -> dict[tuple[int, str], float]:
    return {(step, name): value for step, name, value in store.metrics(run_id)}


def test_each_component_is_listed_under_the_plugin_that_registered_it(plugins):
    info = plugins.info("throwaway")
    assert info.components == {"envs": ["throwaway_lake"], "algorithms": ["count_kept", "needs_big_groups"],
                               "diagnostics": ["groups"], "loggers": ["collect"]}
    registries = plugins.registries
    assert registries.envs.get("throwaway_lake") is ThrowawayLake
    assert registries.algorithms.owner("count_kept") == "throwaway"


def test_the_registered_environment_runs(run):
    store, run_id = run
    (environment,) = [json.loads(e["message"]) for e in store.events(run_id) if e["kind"] == "environment"]
    assert environment["name"] == "throwaway_lake"
    assert store.get_run(run_id)["status"] == "finished"


def test_the_registered_algorithm_does_the_update(run, plugin):
    store, run_id = run
    metrics = stored(store, run_id)
    kept = [len(selection) for selection in plugin.selections]
    assert kept == [2] * STEPS  # the filter "none" keeps both groups
    for step in range(1, STEPS + 1):
        assert metrics[(step, "count/kept_groups")] == 2.0
        assert metrics[(step, "throwaway/updated")] == 1.0  # the update wrapper saw its result
    assert not any(name.startswith("update/") for _, name in metrics)  # nothing trained


def test_the_algorithms_config_problem_decides_at_validation(plugins):
    with pytest.raises(ConfigError, match=r"^needs_big_groups wants group size >= 8 \(got 4\)$"):
        validate_config(throwaway_config(name="needs_big_groups"), plugins)
    big = throwaway_config(name="needs_big_groups")
    big.rollout.group_size = 8
    validate_config(big, plugins)  # the inherited default of count_kept never refuses
    validate_config(throwaway_config(), plugins)


def test_the_registered_diagnostic_measures_and_reviews(run):
    store, run_id = run
    metrics = stored(store, run_id)
    for step in range(STEPS + 1):  # diagnostics.every 1: due on every step, step 0 included
        assert metrics[(step, "groups/count")] == 2.0
        assert metrics[(step, "groups/doubled")] == 4.0


def test_the_registered_logger_sees_every_stored_step(run):
    store, run_id = run
    metrics = stored(store, run_id)
    logged = [call for call in Collect.calls if call[0] == "log"]
    assert [step for _, step, _ in logged] == list(range(STEPS + 1))
    for _, step, values in logged:
        assert values["groups/count"] == metrics[(step, "groups/count")]
    assert Collect.calls[0] == ("open", 0) and Collect.calls[-1] == ("close", "finished")

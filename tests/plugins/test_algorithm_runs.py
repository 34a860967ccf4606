"""Choosing an algorithm by name: resolved settings, errors before any work, whole runs.

``core run --env frozenlake --algo X`` runs for every built-in X (slow: the tiny config
for 2 steps), and the stored config records the algorithm with every resolved setting.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
from typer.testing import CliRunner

from doc_examples import doc_module

from mirage.core.cli.program import app
from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.components import AdvantageEstimator
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config, validate_config
from mirage.core.store.run_store import RunStore
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.verl_algorithms.common import Row
from mirage.plugins.verl_algorithms.update import PolicyGradient

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

SHARED = {
    "lr": 5e-5, "entropy_coef": 0.001, "kl_coef": 0.0, "kl_penalty": "low_var_kl",
    "max_grad_norm": 1.0, "mini_batch_size": 32, "epochs": 1, "micro_batch_size": 128,
    "clip_ratio_low": 0.2, "clip_ratio_c": 3.0, "mini_batches": None, "group_statistics": "exact",
}
NO_CRITIC = {"gamma": None, "lam": None, "critic_lr": None, "value_clip": None}
NO_DAPO = {"dynamic_sampling": False, "extra_rollout_rounds": None, "overlong_penalty": None,
           "overlong_buffer": None}
# What the stored config must say for each algorithm (docs/algorithms.md), with the tiny
# config's max_new_tokens of 32.
RESOLVED = {
    "ppo": {**SHARED, **NO_DAPO, "adv_estimator": "gae", "norm_adv_by_std": None,
            "loss_agg_mode": "token-mean", "clip_ratio_high": 0.2,
            "gamma": 1.0, "lam": 1.0, "critic_lr": 5e-4, "value_clip": 0.5},
    "grpo": {**SHARED, **NO_CRITIC, **NO_DAPO, "adv_estimator": "grpo", "norm_adv_by_std": True,
             "loss_agg_mode": "seq-mean-token-mean", "clip_ratio_high": 0.2},
    "drgrpo": {**SHARED, **NO_CRITIC, **NO_DAPO, "adv_estimator": "grpo", "norm_adv_by_std": False,
               "loss_agg_mode": "seq-mean-token-sum", "clip_ratio_high": 0.2},
    "dapo": {**SHARED, **NO_CRITIC, "adv_estimator": "grpo", "norm_adv_by_std": True,
             "loss_agg_mode": "token-mean", "clip_ratio_high": 0.28, "dynamic_sampling": True,
             "extra_rollout_rounds": 9, "overlong_penalty": 1.0, "overlong_buffer": 6},
}


def invoke(args: list[str]):
    return CliRunner().invoke(app, args, env={"COLUMNS": "200"})


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --------------------------------------------------------------------------- resolved settings


@pytest.mark.parametrize("algo", sorted(RESOLVED))
def test_each_algorithm_resolves_its_preset(algo, tiny_config):
    data = tiny_config()
    data["algorithm"] = {"name": algo}
    resolved = build_config(data).algorithm.model_dump()
    assert resolved == {"name": algo, "options": {}, **RESOLVED[algo]}


def test_presets_live_on_the_algorithm_classes_and_name_registered_estimators():
    registries = build_plugins().registries
    assert registries.estimators.names() == ["gae", "grpo"]
    for name in registries.algorithms.names():
        preset = registries.algorithms.get(name).preset
        assert preset["adv_estimator"] == RESOLVED[name]["adv_estimator"]
        assert preset["adv_estimator"] in registries.estimators


def test_explicit_settings_win_and_resolution_is_stable():
    config = build_config({"algorithm": {
        "name": "dapo", "clip_ratio_high": 0.3, "extra_rollout_rounds": 2, "overlong_buffer": 4,
    }})
    algo = config.algorithm
    assert (algo.clip_ratio_high, algo.extra_rollout_rounds, algo.overlong_buffer) == (0.3, 2, 4)
    assert build_config(config.model_dump(mode="json")) == config


def test_a_setting_switches_on_what_it_needs():
    # GRPO with the GAE estimator gets the critic's settings (the estimator's defaults).
    algo = build_config({"algorithm": {"name": "grpo", "adv_estimator": "gae"}}).algorithm
    assert (algo.gamma, algo.lam, algo.critic_lr, algo.value_clip) == (1.0, 1.0, 5e-4, 0.5)
    assert algo.loss_agg_mode == "seq-mean-token-mean"


def test_an_unresolved_config_has_no_run_hash():
    with pytest.raises(ValueError, match="unresolved"):
        RunConfig().run_hash()
    assert build_config({}).run_hash()  # resolved: hashes


# --------------------------------------------------------------------------- third-party algorithms and estimators


class Ones(AdvantageEstimator):
    """Advantage 1 on every response token (a throwaway estimator)."""

    defaults = {"norm_adv_by_std": False}

    def rows(self, run, trajectories, groups, rewards):
        return [[Row(turn, torch.ones(len(turn.response_ids))) for turn in t.turns if turn.response_ids]
                for t in trajectories]


class Mine(PolicyGradient):
    preset = {"adv_estimator": "ones", "loss_agg_mode": "token-sum", "clip_ratio_high": 0.5}


class Bare(PolicyGradient):
    """A policy gradient without a preset."""


def third_party_plugin() -> ModuleType:
    module = ModuleType("third_party_algorithms")

    @hookimpl
    def mirage_register_algorithms(register):
        register("mine", Mine)
        register("bare", Bare)

    @hookimpl
    def mirage_register_estimators(register):
        register("ones", Ones)

    module.mirage_register_algorithms = mirage_register_algorithms
    module.mirage_register_estimators = mirage_register_estimators
    return module


def test_a_third_party_algorithm_gets_its_own_preset_not_grpos(tiny_config):
    plugins = build_plugins(extra=[("third_party_algorithms", third_party_plugin())])
    data = tiny_config()
    data["algorithm"] = {"name": "mine"}
    algo = build_config(data, plugins).algorithm
    assert (algo.adv_estimator, algo.loss_agg_mode, algo.clip_ratio_high) == ("ones", "token-sum", 0.5)
    assert algo.norm_adv_by_std is False  # the estimator's default
    data["algorithm"] = {"name": "bare"}
    bare = build_config(data, plugins)
    assert (bare.algorithm.adv_estimator, bare.algorithm.loss_agg_mode) == (None, None)
    with pytest.raises(ConfigError, match="'bare' names no advantage estimator"):
        validate_config(bare, plugins)


def test_a_third_party_estimator_trains_through_the_shared_update(tiny_config, tmp_path):
    plugins = build_plugins(extra=[("third_party_algorithms", third_party_plugin())])
    data = tiny_config()
    data["steps"] = 1
    data["filter"] = {"name": "none"}
    data["algorithm"] = {"name": "grpo", "adv_estimator": "ones"}
    db = tmp_path / "runs.duckdb"
    run_id = execute(build_config(data, plugins), db, plugins=plugins, progress=False)
    store = RunStore(db)
    metrics = {name: value for _, name, value in store.metrics(run_id)}
    stored = store.get_run(run_id)["config"]["algorithm"]
    assert stored["adv_estimator"] == "ones"
    assert metrics["update/advantage_abs_mean"] == pytest.approx(1.0)


def test_an_unknown_estimator_lists_the_valid_ones(tiny_config):
    data = tiny_config()
    data["algorithm"] = {"name": "grpo", "adv_estimator": "rloo"}
    with pytest.raises(ConfigError, match="unknown estimator 'rloo'; valid: gae, grpo"):
        build_config(data)


# --------------------------------------------------------------------------- errors before any work


def test_unknown_algo_lists_the_valid_ones(tiny_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    line = one_line_error(invoke(["run", "--config", str(tiny_config_file), "--db", str(db),
                                  "--algo", "nosuch"]))
    assert "'nosuch'" in line and "valid: dapo, drgrpo, grpo, ppo" in line
    assert not db.exists()


def no_critic_plugin() -> ModuleType:
    class NoCriticBackend(LocalBackend):
        supports_critic = False

    module = ModuleType("no_critic_plugin")

    @hookimpl
    def mirage_register_backends(register):
        register("nocritic", NoCriticBackend)

    module.mirage_register_backends = mirage_register_backends
    return module


def test_ppo_on_a_backend_without_a_critic_is_refused_in_one_line(tiny_config, tmp_path):
    plugins = build_plugins(extra=[("no_critic_plugin", no_critic_plugin())])
    data = tiny_config()
    data["model"]["backend"] = "nocritic"
    data["algorithm"] = {"name": "ppo"}
    db = tmp_path / "runs.duckdb"
    with pytest.raises(ConfigError) as info:
        execute(build_config(data), db, plugins=plugins, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert "'ppo'" in message and "critic" in message and "'nocritic'" in message
    assert not db.exists()
    data["algorithm"] = {"name": "grpo"}
    validate_config(build_config(data), plugins)  # no critic needed


@pytest.mark.parametrize("algorithm, fragments", [
    ({"name": "ppo", "critic_lr": 0}, ["algorithm.critic_lr", "greater than 0"]),
    ({"name": "ppo", "gamma": 1.5}, ["algorithm.gamma", "1.5"]),
    ({"name": "dapo", "overlong_buffer": 100}, ["overlong_buffer", "100", "max_new_tokens"]),
    ({"name": "grpo", "loss_agg_mode": "seq-sum"}, ["algorithm.loss_agg_mode", "seq-sum"]),
])
def test_bad_algorithm_settings_fail_in_one_line(algorithm, fragments, make_config_file, tmp_path):
    config = make_config_file("bad.yaml", algorithm=algorithm)
    db = tmp_path / "runs.duckdb"
    line = one_line_error(invoke(["run", "--config", str(config), "--db", str(db)]))
    for fragment in fragments:
        assert fragment in line, line
    assert not db.exists()


# --------------------------------------------------------------------------- whole runs


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(RESOLVED))
def test_core_run_each_algorithm_on_frozenlake(algo, cli, tiny_config_file, tmp_path,
                                               documented_metric_names):
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--env", "frozenlake", "--algo", algo, "--filter", "none",
                         "--config", tiny_config_file, "--steps", "2", "--db", db, "--quiet")
    assert code == 0, err
    store = RunStore(db)
    (row,) = store.list_runs()
    assert row["status"] == "finished"
    assert row["config"]["algorithm"] == {"name": algo, "options": {}, **RESOLVED[algo]}
    metrics = {(step, name) for step, name, _ in store.metrics(row["run_id"])}
    assert {(1, "update/trajectories"), (2, "update/trajectories")} <= metrics
    assert {name for _, name in metrics} <= documented_metric_names
    if algo == "ppo":
        assert (2, "update/value_loss") in metrics
    if algo == "dapo":
        assert (2, "update/extra_rollout_rounds") in metrics


# --------------------------------------------------------------------------- a third-party algorithm


def docs_example_module() -> ModuleType:
    """The RLOO plugin of docs/algorithms.md, executed from the docs' code block."""
    return doc_module("algorithms.md", "my_rloo")


def test_the_documented_third_party_algorithm_works(tiny_config):
    from mirage.core.rl.batch import Trajectory, Turn

    plugins = build_plugins(extra=[("my_rloo", docs_example_module())])
    data = tiny_config()
    data["algorithm"] = {"name": "rloo"}
    config = build_config(data, plugins)
    validate_config(config, plugins)
    assert (config.algorithm.adv_estimator, config.algorithm.loss_agg_mode) == ("rloo", "seq-mean-token-mean")
    estimator = plugins.registries.estimators.get("rloo")(config)
    trajectories = [
        Trajectory(0, k, 0, turns=[Turn("x", "y", "z", "a", [], True, r, [1], [2, 3])])
        for k, r in enumerate([1.0, 0.0, 0.0])
    ]
    rows = estimator.rows(None, trajectories, [0, 0, 0], [[1.0], [0.0], [0.0]])
    # Leave-one-out: 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5.
    assert [turns[0].advantages.tolist() for turns in rows] == [[1.0, 1.0], [-0.5, -0.5], [-0.5, -0.5]]


@pytest.mark.slow
def test_ppo_resumes_with_its_checkpointed_critic(tiny_config, tmp_path):
    data = tiny_config()
    data["algorithm"] = {"name": "ppo"}
    data["filter"] = {"name": "none"}
    data["steps"] = 3
    db = tmp_path / "runs.duckdb"

    def crash(step, metrics):
        if step == 2:
            raise RuntimeError("crash after step 2")

    with pytest.raises(RuntimeError, match="crash"):
        execute(build_config(data), db, progress=False, on_step=crash)
    (row,) = RunStore(db).list_runs()
    checkpoint = tmp_path / "checkpoints" / row["run_id"] / "step-000002"
    assert (checkpoint / "critic.pt").is_file() and (checkpoint / "critic_optimizer.pt").is_file()
    execute(None, db, resume=row["run_id"], progress=False)
    store = RunStore(db)
    assert store.get_run(row["run_id"])["status"] == "finished"
    assert (3, "update/value_loss") in {(s, n) for s, n, _ in store.metrics(row["run_id"])}

"""Choosing an algorithm by name: resolved settings, errors before any work, whole runs.

``core run --env frozenlake --algo X`` runs for every built-in X (slow: the tiny config
for 2 steps), and the stored config records the algorithm with every resolved setting.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from doc_examples import doc_module

from mirage.core.cli import app
from mirage.core.config import ALGORITHM_PRESETS, RunConfig
from mirage.core.hookspecs import hookimpl
from mirage.core.loop import execute
from mirage.core.plugins import build_plugins
from mirage.core.store import RunStore
from mirage.core.validate import ConfigError, build_config, validate_config
from mirage.plugins.backend_local.backend import LocalBackend

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


def test_presets_name_exactly_the_registered_algorithms():
    assert set(build_plugins().registries.algorithms.names()) == set(ALGORITHM_PRESETS)


def test_explicit_settings_win_and_resolution_is_stable():
    config = RunConfig.model_validate({"algorithm": {
        "name": "dapo", "clip_ratio_high": 0.3, "extra_rollout_rounds": 2, "overlong_buffer": 4,
    }})
    algo = config.algorithm
    assert (algo.clip_ratio_high, algo.extra_rollout_rounds, algo.overlong_buffer) == (0.3, 2, 4)
    assert RunConfig.model_validate(config.model_dump(mode="json")) == config


def test_a_setting_switches_on_what_it_needs():
    # GRPO with the GAE estimator gets the critic's settings; PPO's none of DAPO's.
    algo = RunConfig.model_validate({"algorithm": {"name": "grpo", "adv_estimator": "gae"}}).algorithm
    assert (algo.gamma, algo.lam, algo.critic_lr, algo.value_clip) == (1.0, 1.0, 5e-4, 0.5)
    assert algo.loss_agg_mode == "seq-mean-token-mean"
    third_party = RunConfig.model_validate({"algorithm": {"name": "my_algo"}}).algorithm
    assert third_party.model_dump() == {**RunConfig().algorithm.model_dump(), "name": "my_algo"}


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
    from mirage.core.batch import Trajectory, Turn

    plugins = build_plugins(extra=[("my_rloo", docs_example_module())])
    data = tiny_config()
    data["algorithm"] = {"name": "rloo"}
    config = build_config(data)
    validate_config(config, plugins)
    algorithm = plugins.registries.algorithms.get("rloo")(config)
    trajectories = [
        Trajectory(0, k, 0, turns=[Turn("x", "y", "z", "a", [], True, r, [1], [2, 3])])
        for k, r in enumerate([1.0, 0.0, 0.0])
    ]
    rows = algorithm.rows(None, trajectories, [0, 0, 0], [[1.0], [0.0], [0.0]])
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

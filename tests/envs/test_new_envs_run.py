"""``core run --env X --steps 2`` with the tiny preset for every new environment, and
the store's record of the environment (name, version, resolved options)."""

import json

import pytest

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.store.run_store import RunStore

NEW_ENVS = ("countdown", "metamathqa", "searchqa", "webshop", "deepcoder")


def test_new_environments_are_registered():
    envs = build_plugins().registries.envs
    for name in NEW_ENVS:
        assert envs.get(name).name == name


def test_unknown_option_is_a_one_line_error(cli, make_config_file, tmp_path):
    code, _, err = cli("run", "--env", "countdown", "--env-opt", "max_numbr=5",
                       "--config", make_config_file(), "--db", tmp_path / "x.duckdb", "--quiet")
    assert code == 2 and "max_numbr" in err and not (tmp_path / "x.duckdb").exists()


@pytest.mark.slow
@pytest.mark.parametrize("env_name, options", [
    ("countdown", ["num_numbers=4"]),
    ("metamathqa", ["max_attempts=2"]),
    ("searchqa", ["top_k=2"]),
    ("webshop", []),
    ("deepcoder", ["tests=3", "cpu_seconds=1", "wall_seconds=3"]),
])
def test_core_run_two_steps_records_env_version_and_settings(env_name, options, cli,
                                                             make_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    args = ["run", "--env", env_name, "--steps", "2", "--config", make_config_file(),
            "--db", db, "--quiet"]
    for option in options:
        args += ["--env-opt", option]
    code, out, err = cli(*args)
    assert code == 0, err[-2000:]
    (run,) = RunStore(db).list_runs()
    assert run["status"] == "finished"
    assert run["config"]["env"]["name"] == env_name
    (event,) = [e for e in RunStore(db).events(run["run_id"]) if e["kind"] == "environment"]
    recorded = json.loads(event["message"])
    env_cls = build_plugins().registries.envs.get(env_name)
    assert recorded["name"] == env_name and recorded["version"] == env_cls.version
    assert recorded["options"] == env_cls.Options(**dict(o.split("=") for o in options)).model_dump(mode="json")
    assert sorted({step for step, _, _ in RunStore(db).metrics(run["run_id"])}) == [0, 1, 2]

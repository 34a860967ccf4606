"""The real entry-point path for environments: examples/mirage-example-env is installed
in the test venv (scripts/install.sh) and registers ``example_sum``."""

import json
from pathlib import Path

import pytest

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore


@pytest.mark.plugin_autoload
def test_installed_package_registers_its_environment():
    plugins = build_plugins()
    info = plugins.info("example_env")
    assert (info.version, info.builtin) == ("0.1.0", False)
    assert info.components == {"envs": ["example_sum"]}
    env = plugins.registries.envs.get("example_sum")()
    assert env.reset(3) == env.reset(3)
    assert env.step(env.solve()[0]).reward == 1.0


def test_kill_switch_excludes_it():
    assert "example_sum" not in build_plugins().registries.envs


@pytest.mark.slow
@pytest.mark.plugin_autoload
def test_run_on_the_third_party_environment(tiny_config, tmp_path: Path):
    data = tiny_config()
    data["env"] = {"name": "example_sum"}
    data["steps"] = 2
    db = tmp_path / "runs.duckdb"
    run_id = execute(build_config(data), db, progress=False)
    store = RunStore(db)
    run = store.get_run(run_id)
    (message,) = [e["message"] for e in store.events(run_id) if e["kind"] == "environment"]
    assert run["status"] == "finished"
    assert {"name": "example_env", "version": "0.1.0"} in run["plugins"]
    assert json.loads(message) == {"name": "example_sum", "version": "1",
                                   "options": {"careful_share": 0.3, "demo_noise": 0.1, "max_operand": 9}}

"""docs/writing-a-backend.md's example backend, executed from the page: its training
steps arrive through pickle, as a trainer in another process receives them, and it trains
exactly as the local backend does."""

from __future__ import annotations

import copy
from pathlib import Path
from types import ModuleType

import pytest

from doc_examples import doc_module

from mirage.core.config.presets import TINY
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore


def doc_example() -> ModuleType:
    return doc_module("writing-a-backend.md", "my_backend")


def run_metrics(backend: str, db: Path, plugins) -> dict[tuple[int, str], float]:
    data = {"env": {"name": "frozenlake"}, **copy.deepcopy(TINY), "steps": 2, "seed": 3}
    data["model"]["backend"] = backend
    data["model"]["options"] |= {"warmstart_episodes": 200, "warmstart_steps": 300}
    data["rollout"] |= {"temperature": 1.5}
    data["diagnostics"] = {"names": ["reward", "grad"], "options": {"grad": {"every": 1}}}
    execute(build_config(data), db, plugins=plugins, progress=False)
    store = RunStore(db)
    (run,) = store.list_runs()
    return {(s, n): v for s, n, v in store.metrics(run["run_id"]) if not n.startswith("time/")}


@pytest.mark.slow
def test_the_documented_backend_trains_exactly_as_the_local_one(tmp_path, monkeypatch):
    module = doc_example()
    sent = []
    real = module.pickle.dumps
    monkeypatch.setattr(module.pickle, "dumps", lambda obj: sent.append(obj) or real(obj))
    plugins = build_plugins(extra=[("my_backend", module)])
    local = run_metrics("local", tmp_path / "local.duckdb", plugins)
    pickled = run_metrics("pickled_step", tmp_path / "pickled.duckdb", plugins)
    assert sent, "no training step went through the example's train_step"
    assert local[(1, "update/optimizer_steps")] >= 1
    assert pickled == local

"""Fixtures for the app's tests.

``app_store`` builds, once per test session, a store from three real tiny FrozenLake runs
through the CLI (threads 1): ``diag`` (slip 0, top_p, seed 0), ``plain`` (slip 0.2, no
filter, seed 1, *no diagnostics*) and ``diag2`` (slip 0.2, top_p, seed 2). Tests copy it
when they change it. Helpers for driving the app live in ``app_testing.py``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from bench_store import write_bench_store
from shared_builds import build_once, built_data


# name -> (run options, config overrides)
RUNS = {
    "diag": (["--env-opt", "slip=0", "--filter", "top_p", "--seed", "0"], {}),
    "plain": (["--env-opt", "slip=0.2", "--filter", "none", "--seed", "1"],
              {"diagnostics": {"names": []}}),
    "diag2": (["--env-opt", "slip=0.2", "--filter", "top_p", "--seed", "2"], {}),
}


@pytest.fixture(scope="session")
def app_store(tmp_path_factory, mirage_cache, tiny_config, cli_for_fixtures) -> tuple[Path, dict[str, str]]:
    """(store path, {name: run_id}) of the three real runs, built once per test run and
    shared by the xdist workers (conftest's ``build_once``); treat it as read-only."""

    def build(tmp: Path) -> dict[str, str]:
        db = tmp / "runs" / "mirage.duckdb"
        env = {**os.environ, "MIRAGE_CACHE": str(mirage_cache), "MIRAGE_DISABLE_PLUGIN_AUTOLOAD": "1"}
        env.pop("MIRAGE_PLUGINS", None)
        ids = {}
        for name, (options, overrides) in RUNS.items():
            config = tmp / f"{name}.yaml"
            config.write_text(yaml.safe_dump({**tiny_config(), **overrides}))
            code, out, err = cli_for_fixtures("run", "--config", config, "--db", db, "--quiet", *options, env=env)
            assert code == 0, err
            ids[name] = re.search(r"run (\S+) finished", out).group(1)
        return ids

    tmp = build_once(tmp_path_factory, "app-store", build)
    return tmp / "runs" / "mirage.duckdb", built_data(tmp)


@pytest.fixture
def bench_store(tmp_path):
    """The hand-checked store of tests/app/bench_store.py (two sokoban runs, six newer
    FrozenLake runs: none and top_p over seeds 0-2)."""
    return write_bench_store(tmp_path / "bench.duckdb")

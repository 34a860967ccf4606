"""Fixtures shared by the whole test suite.

* ``tiny_config_file`` writes a YAML RunConfig small enough for a run to take seconds;
  ``tiny_config()`` gives the same config as plain data and ``make_config_file(name,
  **overrides)`` writes it with top-level sections replaced.
* Every test gets ``MIRAGE_CACHE`` pointing at one session-wide directory (so the tiny
  warm start is built once and reused), ``MIRAGE_DB`` inside its own tmp_path, no
  ``MIRAGE_PLUGINS`` and ``MIRAGE_DISABLE_PLUGIN_AUTOLOAD=1`` (so only built-ins load);
  a test opts out of the kill switch with ``@pytest.mark.plugin_autoload``.
* ``old_store(version)`` copies the fixture store of a shipped schema version to tmp_path.
* ``contents(store)`` is everything a store's public reads return (to compare before
  and after an operation that must change nothing).
* Under pytest-xdist (the README's ``pytest`` runs ``-n auto``), each worker computes with
  one torch thread (``OMP_NUM_THREADS=1`` for the processes it starts), so two workers
  never oversubscribe two cores (a third worker was tried: 16.6 min of tests against
  15.6); ``MIRAGE_CACHE`` and the builds of ``build_once`` are shared by the workers of
  one run (each under a file lock), everything else is per test.
  Tests that start several busy processes themselves (ranks, servers, a browser) carry
  ``@pytest.mark.xdist_group("busy")``: one worker runs them one after another while the
  other runs the rest (two of them at once run four or more busy processes on the two
  cores). The grouping needs pytest < 9.2 (pyproject's test extra): 9.2 derives
  ``nodeid`` from ``_id``, and pytest-xdist 3.8 groups by rewriting ``_nodeid``.
* ``cli(*args)`` runs the ``core`` command line in a process of its own (forked from a
  warm zygote, tests/cli_zygote.py) and returns
  ``(returncode, stdout, stderr)``; ``cli_argv(*args)`` is its argument list, for tests
  that start the process themselves.
"""

from __future__ import annotations

import atexit
import copy
import gzip
import re
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest
import yaml
from _pytest.nodes import Node
from cli_zygote import Zygote
from shared_builds import shared_root

from mirage.core.config.presets import TINY

pytest_plugins = ("slow_guard",)

REPO = Path(__file__).resolve().parents[1]
# No test reaches the Hugging Face hub (no machine the suite runs on can): a name that is
# not a local directory fails at once instead of after the hub's retries, and the CLI
# zygote, started with this environment, serves the tests that ask for it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TINY_CONFIG = {"env": {"name": "frozenlake"}, **copy.deepcopy(TINY)}

CliResult = tuple[int, str, str]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "plugin_autoload: do not set MIRAGE_DISABLE_PLUGIN_AUTOLOAD for this test"
    )
    if config.getoption("dist", "no") == "loadgroup" and "_nodeid" not in Node.__slots__:
        # pytest-xdist 3.8 groups by rewriting Node._nodeid, which pytest 9.2 no longer reads
        raise pytest.UsageError(
            f"--dist loadgroup cannot group under pytest {pytest.__version__} (pytest-xdist "
            "rewrites a field it no longer reads): install pyproject's test extra (pytest<9.2)")
    if hasattr(config, "workerinput"):  # an xdist worker: one core's worth of threads each
        for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[variable] = "1"
        import torch

        torch.set_num_threads(1)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The zygote starts (on first use) with the environment the tests begin with: after
    collection, whose imports set variables of their own (matplotlib's ``MPLBACKEND``,
    MLflow's telemetry session id). Taken before them, every command of the run differed
    from the zygote and went to a fresh interpreter."""
    _ZYGOTE.environment = dict(os.environ)


@pytest.fixture(scope="session")
def mirage_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One warm-start cache for the whole test run, shared by its workers (warm starts
    are written to a private directory and renamed into place, so two builders are
    safe)."""
    cache = shared_root(tmp_path_factory) / "mirage-cache"
    cache.mkdir(exist_ok=True)
    return cache


@pytest.fixture(autouse=True)
def environment_kept():
    """Whatever a test's in-process code sets in ``os.environ`` (a sweep on Ray sets
    ``RAY_AUTH_MODE``, a launch its loopback variables) is undone after it: no test sees
    another's, and the CLI zygote keeps serving the worker's later tests (it serves only
    an environment like its own; each leaked variable had sent every later command of
    that worker to a fresh interpreter, about 8 s each)."""
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture(autouse=True)
def mirage_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, environment_kept,
               mirage_cache: Path, tmp_path: Path) -> None:
    monkeypatch.setenv("MIRAGE_CACHE", str(mirage_cache))
    monkeypatch.delenv("MIRAGE_PLUGINS", raising=False)
    # A command that forgets --db writes here, never into the repository.
    monkeypatch.setenv("MIRAGE_DB", str(tmp_path / "default-db" / "mirage.duckdb"))
    if request.node.get_closest_marker("plugin_autoload"):
        monkeypatch.delenv("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    else:
        monkeypatch.setenv("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", "1")


def write_config(path: Path, **overrides: object) -> Path:
    """Write TINY_CONFIG (top-level keys replaced by ``overrides``) as YAML to ``path``."""
    data = {**copy.deepcopy(TINY_CONFIG), **overrides}
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="session")
def tiny_config() -> Callable[[], dict]:
    """A factory of fresh deep copies of the tiny config as plain data."""
    return lambda: copy.deepcopy(TINY_CONFIG)


@pytest.fixture
def tiny_config_file(tmp_path: Path) -> Path:
    return write_config(tmp_path / "tiny.yaml")


@pytest.fixture
def make_config_file(tmp_path: Path) -> Callable[..., Path]:
    """``make_config_file(name, **overrides)``: the tiny config with top-level overrides."""
    return lambda name="config.yaml", **overrides: write_config(tmp_path / name, **overrides)


def cli_command(*args: str | os.PathLike[str]) -> list[str]:
    return [sys.executable, "-m", "mirage", *map(str, args)]


_ZYGOTE = Zygote(os.environ)  # pytest_collection_finish sets its environment once collection is done
atexit.register(_ZYGOTE.close)


def run_cli(*args: str | os.PathLike[str], timeout: float = 300, env: dict[str, str] | None = None,
            input: str | None = None) -> CliResult:
    """Run ``core ARGS...`` in a process of its own (with this process's environment, or
    ``env``, in the repository, reading ``input`` on its standard input or nothing); return
    (returncode, stdout, stderr). The process is forked
    from a warm zygote that has torch and MIRAGE imported (tests/cli_zygote.py), unless the
    environment differs from the zygote's in a variable some library reads at import (then,
    and whenever ``MIRAGE_TEST_SUBPROCESS=1``, it is a fresh interpreter)."""
    env = dict(os.environ if env is None else env)
    if env.get("MIRAGE_TEST_SUBPROCESS") == "1" or not _ZYGOTE.serves(env):
        done = subprocess.run(cli_command(*args), capture_output=True, text=True, timeout=timeout,
                              cwd=REPO, env=env, input=input)
        return done.returncode, done.stdout, done.stderr
    scratch = Path(tempfile.gettempdir()) / f"mirage-cli-{os.getuid()}"
    return _ZYGOTE.run(list(map(str, args)), env, REPO, timeout, scratch, stdin=input)


@pytest.fixture(scope="session")
def cli_for_fixtures() -> Callable[..., CliResult]:
    """``run_cli`` for fixtures of a wider scope than a test's, which the ``cli`` fixture
    cannot serve: they pass the environment of the runs they build (``env=``)."""
    return run_cli


@pytest.fixture(scope="session")
def cli_argv() -> Callable[..., list[str]]:
    """``cli_argv(*args)``: the argv that runs ``core ARGS...`` (for Popen)."""
    return cli_command


@pytest.fixture(scope="session")
def cli_zygote() -> Zygote:
    """This test process's CLI zygote (tests/cli_zygote.py)."""
    return _ZYGOTE


@pytest.fixture
def cli() -> Callable[..., CliResult]:
    """The ``run_cli`` helper as a fixture (the environment fixtures apply to it)."""
    return run_cli


@pytest.fixture(scope="session")
def documented_metric_names() -> set[str]:
    """Every metric name in the first column of docs/metrics.md's table; a name written
    with ``{a,b}`` stands for each expansion."""
    names: set[str] = set()
    for line in (REPO / "docs" / "metrics.md").read_text().splitlines():
        if line.startswith("| `"):
            for pattern in re.findall(r"`([a-z_{]+/[a-z0-9_@/{},]+)`", line.split("|")[1]):
                names.update(_expand_braces(pattern))
    return names


def _expand_braces(pattern: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [name for option in match.group(1).split(",") for name in _expand_braces(head + option + tail)]


@pytest.fixture
def populated_store(tmp_path: Path) -> Path:
    """A store that already holds one run with a step, a group and an event."""
    from mirage.core.config.run_config import RunConfig
    from mirage.core.store.run_store import GroupRow, RunStore

    db = tmp_path / "store" / "runs.duckdb"
    store = RunStore(db)
    store.create_run("existing", RunConfig().model_dump(mode="json"), [], None, seed=0)
    store.record_step("existing", 0, {"train/return": 0.5}, [GroupRow(0, 1, 0.5, 0.25, 0.5, True)])
    store.record_event("existing", 0, "backend", "{}")
    return db


def component_plugins(name: str, *, filters: dict | None = None, diagnostics: dict | None = None,
                      loggers: dict | None = None):
    """Plugins with a throwaway plugin module ``name`` (version 0.0.1) that registers the
    given filter, diagnostic and logger classes by name, beside the built-ins."""
    from types import ModuleType

    from mirage.core.plugin_api.hookspecs import hookimpl
    from mirage.core.plugin_api.manager import build_plugins

    def registrar(components: dict):
        @hookimpl
        def register_all(register):
            for component, cls in components.items():
                register(component, cls)
        return register_all

    module = ModuleType(name)
    module.__version__ = "0.0.1"
    for hook, components in (("mirage_register_filters", filters), ("mirage_register_diagnostics", diagnostics),
                             ("mirage_register_loggers", loggers)):
        if components:
            setattr(module, hook, registrar(components))  # pluggy matches hooks by attribute name
    return build_plugins(extra=[(name, module)])


@pytest.fixture(scope="session")
def make_plugins() -> Callable[..., object]:
    """The ``component_plugins`` helper as a fixture."""
    return component_plugins


def store_contents(store) -> dict[str, dict]:
    """Everything a store's public reads return, per run: to check that an operation
    changed nothing (compare before and after)."""
    return {run["run_id"]: {"run": run, "metrics": store.metrics(run["run_id"]),
                            "groups": store.groups(run["run_id"]),
                            "events": store.events(run["run_id"]),
                            "rollouts": store.rollouts(run["run_id"])}
            for run in store.list_runs()}


@pytest.fixture(scope="session")
def contents() -> Callable[..., dict[str, dict]]:
    """The ``store_contents`` helper as a fixture."""
    return store_contents


STORES = REPO / "tests" / "core" / "data" / "stores"  # one store file per shipped schema


@pytest.fixture
def old_store(tmp_path: Path) -> Callable[[int], Path]:
    """``old_store(version)``: a fresh copy, in tmp_path, of the fixture store written by
    the code that shipped schema ``version`` (tests/core/data/stores/README.md)."""
    def unpack(version: int) -> Path:
        target = tmp_path / f"schema_{version}.duckdb"
        with gzip.open(STORES / f"schema_{version}.duckdb.gz") as packed, target.open("wb") as out:
            shutil.copyfileobj(packed, out)
        return target
    return unpack

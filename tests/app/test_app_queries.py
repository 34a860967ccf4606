"""The app's data access: read-only, short-lived, retried connections (mirage/app/reader.py),
SQL aggregation (mirage/app/queries.py) and config paths (mirage/app/config_paths.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import psutil
import pytest

from mirage.app import queries
from mirage.app.config_paths import axes, diff, flatten, moving_with, unchosen, varying_paths
from mirage.app.reader import StoreReader
from mirage.core.store.file import StoreBusyError
from mirage.core.store.run_store import RunStore

REPO = Path(__file__).resolve().parents[2]


def test_reader_never_creates_a_store(tmp_path):
    reader = StoreReader(tmp_path / "none.duckdb")
    assert not reader.exists() and reader.tables() == frozenset()
    assert queries.runs(reader).empty
    assert not (tmp_path / "none.duckdb").exists()


def test_reader_closes_the_file_after_each_query(tmp_path):
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run("r", {}, [], None)
    reader = StoreReader(store.path)
    assert queries.runs(reader)["run_id"].tolist() == ["r"]
    # a writer in another process gets the file at once: the reader holds nothing
    code = "import duckdb, sys; duckdb.connect(sys.argv[1]).execute('SELECT 1'); print('ok')"
    done = subprocess.run([sys.executable, "-c", code, str(store.path)], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


@pytest.fixture
def held_store(tmp_path):
    """A store whose file another process holds for writing for about 1.5 s."""
    store = RunStore(tmp_path / "held.duckdb")
    store.create_run("r", {}, [], None)
    code = textwrap.dedent("""
        import sys, time, duckdb
        con = duckdb.connect(sys.argv[1])
        print("held", flush=True)
        time.sleep(1.5)
        con.close()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code, str(store.path)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "held"
    yield store.path
    proc.wait(timeout=30)


def test_reader_waits_while_a_writer_holds_the_lock(held_store):
    started = time.monotonic()
    frame = queries.runs(StoreReader(held_store, lock_timeout=30))
    assert frame["run_id"].tolist() == ["r"]
    assert time.monotonic() - started > 0.3  # it had to wait for the writer


def test_reader_gives_up_after_its_timeout(held_store):
    with pytest.raises(StoreBusyError, match="stayed locked for 0.2s"):
        StoreReader(held_store, lock_timeout=0.2).query("SELECT 1")


def test_curves_average_long_runs_over_step_buckets(tmp_path):
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run("long", {}, [], None)
    store.create_run("other", {}, [], None)
    for step in range(100):
        store.record_step("long", step, {"x": float(step), "y": 1.0})
    store.record_step("other", 3, {"x": -1.0})
    reader = StoreReader(store.path)
    frame = queries.curves(reader, ["long"], ["x"], max_points=10)
    assert frame["step"].tolist() == [9, 19, 29, 39, 49, 59, 69, 79, 89, 99]
    assert frame["value"].tolist() == [4.5 + 10 * i for i in range(10)]
    full = queries.curves(reader, ["long", "other"], ["x"], max_points=1000)
    assert len(full) == 101 and set(full["name"]) == {"x"}
    assert queries.curves(reader, [], ["x"], 10).empty


def test_queries_take_values_as_parameters(tmp_path):
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run("r'; DROP TABLE runs; --", {"filter": {"name": "x"}}, [], None)
    store.record_step("r'; DROP TABLE runs; --", 1, {"val/success": 0.5})
    reader = StoreReader(store.path)
    odd = "r'; DROP TABLE runs; --"
    assert queries.metric_names(reader, [odd]) == ["val/success"]
    assert queries.final_by_axes(reader, [odd], "val/success", "filter.name", None)[
        "mean"].tolist() == [0.5]
    assert reader.has_table("runs")


def test_json_path_quotes_each_part():
    assert queries.json_path("filter.rho") == '$."filter"."rho"'
    con = duckdb.connect()
    value = con.execute("SELECT json_extract_string(?, ?)",
                        ['{"env": {"options": {"slip": 0.2}}}', queries.json_path("env.options.slip")])
    assert value.fetchone()[0] == "0.2"


def test_flatten_diff_and_varying_paths():
    a = {"env": {"name": "frozenlake", "options": {}}, "filter": {"rho": 0.9}, "seed": 0}
    b = {"env": {"name": "frozenlake", "options": {"slip": 0.2}}, "filter": {"rho": 0.5}, "seed": 1}
    assert flatten(a) == {"env.name": "frozenlake", "env.options": {}, "filter.rho": 0.9, "seed": 0}
    table = diff(a, b)
    assert table.values.tolist() == [
        ["env.options", "{}", "(absent)"], ["env.options.slip", "(absent)", "0.2"],
        ["filter.rho", "0.9", "0.5"], ["seed", "0", "1"]]
    assert diff(a, a).empty
    assert varying_paths([a, b]) == ["env.options.slip", "filter.rho"]  # no seed
    assert varying_paths([a]) == [] and varying_paths([]) == []


def test_axes_are_paths_that_split_the_runs_their_own_way():
    def cfg(env, instruction, filter_name, rho, steps, seed=0):
        options = {"show_instruction": instruction} if env == "sokoban" else {}
        return {"env": {"name": env, "options": options}, "seed": seed, "steps": steps,
                "filter": {"name": filter_name, "rho": rho}}
    configs = [cfg("sokoban", True, "none", 1.0, 20), cfg("sokoban", True, "top_p", 0.9, 20),
               cfg("frozenlake", None, "none", 1.0, 60), cfg("frozenlake", None, "top_p", 0.9, 20),
               cfg("frozenlake", None, "none", 1.0, 20, seed=1)]
    # show_instruction only some configs have; rho splits the runs as filter.name does
    assert axes(configs) == ["env.name", "filter.name", "steps"]
    # two frozenlake-none runs differ in steps: not replicates of one cell
    assert unchosen(configs, ["env.name", "filter.name"]) == ["steps"]
    assert unchosen(configs, ["env.name", "filter.name", "steps"]) == []
    assert unchosen(configs, ["env.name", "steps"]) == ["filter.name"]
    # between these two runs steps changes with the filter: a comparison measures both
    assert moving_with(configs[2:4], ["filter.name", "filter.rho"]) == ["steps"]
    assert moving_with(configs, ["filter.name", "filter.rho"]) == []


def test_final_by_axes_keeps_runs_apart_that_differ_elsewhere(tmp_path):
    store = RunStore(tmp_path / "s.duckdb")
    for run_id, (filter_name, steps, value) in {
        "a": ("none", 20, 0.2), "b": ("none", 20, 0.4), "c": ("none", 60, 0.9),
        "d": ("top_p", 20, 0.5),
    }.items():
        store.create_run(run_id, {"filter": {"name": filter_name}, "steps": steps}, [], None)
        store.record_step(run_id, 1, {"val/success": value})
    reader = StoreReader(store.path)
    cells = queries.final_by_axes(reader, list("abcd"), "val/success", "filter.name", None,
                                  ["steps"])
    rows = {(a, tuple(apart)): (mean, n) for a, apart, mean, n in
            zip(cells["a"], cells["apart"], cells["mean"], cells["replicates"])}
    assert rows == {("none", ("20",)): (pytest.approx(0.3), 2), ("none", ("60",)): (0.9, 1),
                    ("top_p", ("20",)): (0.5, 1)}
    pooled = queries.final_by_axes(reader, list("abcd"), "val/success", "filter.name", None)
    assert pooled["replicates"].tolist() == [3, 1]  # what the pivot used to show


def test_runs_reads_the_tags_column(tmp_path):
    store = RunStore(tmp_path / "s.duckdb")
    store.create_run("r", {}, [], None, tags=["baseline", "lake"])
    assert list(queries.runs(StoreReader(store.path))["tags"].iloc[0]) == ["baseline", "lake"]


def test_runs_reads_a_store_without_label_or_liveness_columns(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE runs (run_id TEXT, status TEXT, config TEXT, experiment TEXT,"
                " cell TEXT, seed BIGINT, last_step INTEGER, error TEXT,"
                " created_at TIMESTAMP, updated_at TIMESTAMP)")
    con.execute("INSERT INTO runs VALUES ('r', 'finished', '{}', NULL, NULL, 0, 3, NULL,"
                " now()::TIMESTAMP, now()::TIMESTAMP)")
    con.close()
    frame = queries.runs(StoreReader(path))
    assert frame["status"].tolist() == ["finished"] and "tags" not in frame.columns


def test_runs_shows_a_run_whose_process_is_gone_as_crashed(tmp_path):
    """The app reads the effective status (mirage/core/store/heartbeat.py), not the stored one."""
    store = RunStore(tmp_path / "s.duckdb")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for run_id, pid in (("gone", dead.pid), ("alive", os.getpid())):
        store.create_run(run_id, {}, [], None, process={
            "pid": pid, "host": socket.gethostname(),
            "process_started": psutil.Process().create_time() if pid == os.getpid() else 0.0})
        store.heartbeat(run_id)
    frame = queries.runs(StoreReader(store.path)).set_index("run_id")
    assert frame.loc["gone", "status"] == "crashed"
    assert frame.loc["alive", "status"] == "running"
    assert "pid" not in frame.columns


def test_regimes_name_each_runs_reasoning_regime_and_when_it_began(tmp_path):
    store = RunStore(tmp_path / "s.duckdb")
    for run_id in ("mi", "plain"):
        store.create_run(run_id, {}, [], None)
    for step, retrieval in ((0, 0.9), (5, 0.9), (10, 0.2)):
        store.record_step("mi", step, {"mi/first_turn/retrieval_acc": retrieval,
                                       "mi/first_turn/retrieval_chance": 0.125,
                                       "mi/first_turn/h_cond": 0.5, "mi/first_turn/format_valid": 1.0})
    store.record_step("plain", 0, {"train/success": 1.0})
    found = queries.regimes(StoreReader(store.path), ["mi", "plain"])
    assert found == {"mi": "diverse from step 0, template collapse from step 10", "plain": "not measured"}

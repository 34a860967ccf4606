"""Tests for the DuckDB run store (mirage/core/store/run_store.py)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from datetime import timezone
from pathlib import Path

import duckdb
import numpy as np
import pytest

from mirage.core.store.file import SCHEMA_VERSION, StoreBusyError
from mirage.core.store.rollouts import RolloutRow
from mirage.core.store.run_store import GroupRow, RunStore, default_db_path, new_run_id

REPO = Path(__file__).resolve().parents[2]
STORE_VERSIONS = range(1, SCHEMA_VERSION + 1)  # tests/core/data/stores: one file each
PLUGINS = [{"name": "countdown", "version": "1.0"}]


@pytest.fixture(params=["new", *STORE_VERSIONS], ids=lambda v: f"schema-{v}")
def store(request: pytest.FixtureRequest, tmp_path: Path, old_store) -> RunStore:
    """An empty store: a new file, or a fixture file written by an older release (migrated
    on opening), emptied through the public API."""
    if request.param == "new":
        return RunStore(tmp_path / "nested" / "dir" / "runs.duckdb")
    store = RunStore(old_store(request.param))
    for run in store.list_runs():
        store.delete_run(run["run_id"])
    return store


def _groups(n: int, offset: float = 0.0) -> list[GroupRow]:
    return [GroupRow(i, 100 + i, 0.5 + offset, 0.25, 0.5, i % 2 == 0) for i in range(n)]


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _hold_lock(path: Path, seconds: float, read_only: bool) -> subprocess.Popen[str]:
    """Another process that holds a DuckDB connection on ``path``; returns once it holds it."""
    code = """
        import sys, time, duckdb
        con = duckdb.connect(sys.argv[1], read_only=sys.argv[3] == "1")
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
        con.close()
    """
    proc = _spawn(code, str(path), str(seconds), "1" if read_only else "0")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held", proc.stderr.read() if proc.stderr else ""
    return proc


def test_schema_created_and_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "runs.duckdb"
    store = RunStore(path)
    assert path.exists() and store.path == path
    store.create_run("r1", {"lr": 1e-6}, PLUGINS, "abc123")
    again = RunStore(str(path))  # str path too; existing data untouched
    assert again.get_run("r1") is not None
    assert [r["run_id"] for r in again.list_runs()] == ["r1"] and again.metrics("r1") == []
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    RunStore(path)
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE schema_version SET version = ?", [SCHEMA_VERSION + 1])
    with pytest.raises(RuntimeError, match="newer"):
        RunStore(path)


def test_run_round_trips(store: RunStore) -> None:
    config = {"model": {"name": "tiny"}, "lr": 1e-6, "path": Path("/x/y"), "tags": ["a"]}
    store.create_run("r1", config, PLUGINS, "deadbeef", experiment="exp", cell="c1", seed=7)
    run = store.get_run("r1")
    assert run is not None
    assert run["run_id"] == "r1" and run["status"] == "running"
    assert run["config"] == {"model": {"name": "tiny"}, "lr": 1e-6, "path": "/x/y", "tags": ["a"]}
    assert run["plugins"] == PLUGINS
    assert (run["git_commit"], run["experiment"], run["cell"], run["seed"]) == (
        "deadbeef", "exp", "c1", 7,
    )  # fmt: skip
    assert run["last_step"] is None and run["error"] is None and run["finished_at"] is None
    assert run["created_at"].tzinfo == timezone.utc
    assert run["updated_at"] >= run["created_at"]
    assert store.get_run("missing") is None

    store.create_run("r2", {}, [], None)
    bare = store.get_run("r2")
    assert bare is not None and bare["git_commit"] is None and bare["seed"] is None
    with pytest.raises(ValueError, match="r1"):
        store.create_run("r1", {}, [], None)


def test_unknown_run_raises_key_error_and_writes_nothing(store: RunStore, contents) -> None:
    store.create_run("known", {}, [], None)
    store.record_step("known", 1, {"loss": 1.0}, _groups(2))
    before = contents(store)
    calls = [
        lambda: store.record_step("ghost", 1, {"loss": 1.0}, _groups(2)),
        lambda: store.record_event("ghost", 1, "note", "hi"),
        lambda: store.set_status("ghost", "failed", "boom"),
        lambda: store.truncate_after("ghost", 0),
    ]
    for call in calls:
        with pytest.raises(KeyError, match="ghost"):
            call()
    assert contents(store) == before


def test_record_step_and_replace_on_rerecord(store: RunStore) -> None:
    store.create_run("r", {}, PLUGINS, None)
    store.record_step("r", 1, {"loss": 2.0, "reward": 0.1}, _groups(3))
    store.record_step("r", 2, {"loss": 1.5, "reward": 0.2}, _groups(3))
    assert store.get_run("r")["last_step"] == 2  # type: ignore[index]

    # Re-record step 1 (a resumed run redoing it): replaced, never duplicated.
    store.record_step("r", 1, {"loss": 1.9}, _groups(2, offset=0.25))
    assert store.metrics("r") == [
        (1, "loss", 1.9), (2, "loss", 1.5), (2, "reward", 0.2),
    ]  # fmt: skip
    assert store.metrics("r", "reward") == [(2, "reward", 0.2)]
    step1 = store.groups("r", step=1)
    assert [g["prompt_index"] for g in step1] == [0, 1]
    assert step1[0] == {
        "step": 1, "prompt_index": 0, "seed": 100, "reward_mean": 0.75,
        "reward_variance": 0.25, "reward_std": 0.5, "kept": True,
    }  # fmt: skip
    assert step1[1]["kept"] is False
    assert len(store.groups("r")) == 5
    assert store.get_run("r")["last_step"] == 2  # type: ignore[index]  # never moves back
    assert (len(store.metrics("r")), store.events("r"), store.rollouts("r")) == (3, [], [])


def test_nan_and_none_are_skipped(store: RunStore) -> None:
    store.create_run("r", {}, [], None)
    store.record_step("r", 1, {"a": math.nan, "b": None, "c": 3.0, "d": math.inf})
    assert store.metrics("r") == [(1, "c", 3.0), (1, "d", math.inf)]
    with pytest.raises(TypeError, match="val/bad"):  # and nothing of that step is written
        store.record_step("r", 2, {"val/ok": 1.0, "val/bad": "x"})  # type: ignore[dict-item]
    assert store.metrics("r", "val/ok") == []


def test_truncate_after(store: RunStore) -> None:
    store.create_run("r", {}, [], None)
    for step in range(1, 6):
        store.record_step("r", step, {"loss": float(step)}, _groups(2))
        store.record_event("r", step, "checkpoint", f"ckpt {step}")
    store.create_run("other", {}, [], None)
    store.record_step("other", 9, {"loss": 9.0}, _groups(1))

    store.truncate_after("r", 3)
    assert [s for s, _, _ in store.metrics("r")] == [1, 2, 3]
    assert sorted({g["step"] for g in store.groups("r")}) == [1, 2, 3]
    assert [e["step"] for e in store.events("r")] == [1, 2, 3]
    assert store.get_run("r")["last_step"] == 3  # type: ignore[index]
    assert store.metrics("other") == [(9, "loss", 9.0)]  # other runs untouched

    store.record_step("r", 4, {"loss": 4.5})  # the resumed run continues cleanly
    assert store.metrics("r", "loss")[-1] == (4, "loss", 4.5)
    assert store.get_run("r")["last_step"] == 4  # type: ignore[index]


def test_events(store: RunStore) -> None:
    store.create_run("r", {}, [], None)
    store.record_event("r", 2, "warning", "second step")
    store.record_event("r", 0, "start", "hello")
    store.record_event("r", 2, "checkpoint", "saved")
    events = store.events("r")
    assert [(e["step"], e["kind"], e["message"]) for e in events] == [
        (0, "start", "hello"), (2, "warning", "second step"), (2, "checkpoint", "saved"),
    ]  # fmt: skip
    assert all(e["at"].tzinfo == timezone.utc for e in events)
    assert store.events("nobody") == []


def test_set_status(store: RunStore) -> None:
    store.create_run("r", {}, [], None)
    store.set_status("r", "failed", "CUDA OOM")
    run = store.get_run("r")
    assert run is not None and run["status"] == "failed" and run["error"] == "CUDA OOM"
    assert run["finished_at"] is not None
    store.set_status("r", "running")  # resumed
    run = store.get_run("r")
    assert run is not None and run["finished_at"] is None and run["error"] is None
    store.set_status("r", "finished")
    assert store.get_run("r")["finished_at"] is not None  # type: ignore[index]
    with pytest.raises(ValueError, match="done"):
        store.set_status("r", "done")


def test_list_runs_oldest_first(store: RunStore) -> None:
    assert store.list_runs() == []
    ids = [new_run_id() for _ in range(3)]
    for i, run_id in enumerate(ids):
        store.create_run(run_id, {"i": i}, PLUGINS, None, seed=i)
    runs = store.list_runs()
    assert [r["run_id"] for r in runs] == ids  # oldest first
    assert [r["config"] for r in runs] == [{"i": 0}, {"i": 1}, {"i": 2}]
    store.record_step(ids[0], 1, {"x": 1.0, "y": 2.0}, _groups(4))
    store.record_event(ids[1], 0, "start", "")
    assert [(len(store.metrics(i)), len(store.groups(i)), len(store.events(i))) for i in ids] == [
        (2, 4, 0), (0, 0, 1), (0, 0, 0)]


def test_new_run_id_and_default_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", new_run_id())
    assert len({new_run_id() for _ in range(50)}) == 50
    monkeypatch.delenv("MIRAGE_DB", raising=False)
    assert default_db_path() == Path("runs/mirage.duckdb")
    monkeypatch.setenv("MIRAGE_DB", str(tmp_path / "x.duckdb"))
    assert default_db_path() == tmp_path / "x.duckdb"


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "reader"])
def test_write_waits_for_lock_held_by_other_process(tmp_path: Path, read_only: bool) -> None:
    path = tmp_path / "runs.duckdb"
    store = RunStore(path)
    impatient = RunStore(path, lock_timeout=0.2, write_lock_timeout=0.2)
    store.create_run("r", {}, [], None)

    holder = _hold_lock(path, 0.8, read_only)
    try:
        with pytest.raises(StoreBusyError, match="locked"):
            impatient.record_step("r", 0, {"loss": 0.0})
        start = time.monotonic()
        store.record_step("r", 1, {"loss": 1.0}, _groups(2))  # waits, then succeeds
        waited = time.monotonic() - start
    finally:
        assert holder.wait(timeout=10) == 0
    assert waited > 0.3
    assert store.metrics("r") == [(1, "loss", 1.0)]


def test_reader_in_other_process_between_writes(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    store = RunStore(path)
    store.create_run("r", {"k": "v"}, PLUGINS, None)
    store.record_step("r", 1, {"loss": 1.0}, _groups(2))
    reader = """
        import json, sys
        from mirage.core.store.run_store import RunStore
        s = RunStore(sys.argv[1])
        run = s.get_run("r")
        print(json.dumps({"status": run["status"], "config": run["config"],
                          "metrics": s.metrics("r"), "groups": len(s.groups("r"))}))
    """
    proc = _spawn(reader, str(path))
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    seen = json.loads(out)
    assert seen["status"] == "running" and seen["config"] == {"k": "v"}
    assert seen["metrics"] == [[1, "loss", 1.0]]
    assert seen["groups"] == 2

    store.record_step("r", 2, {"loss": 0.5})  # the writer carries on after the reader
    assert len(store.metrics("r")) == 2
    assert os.path.getsize(path) > 0


def test_finished_run_finds_only_finished_runs_with_the_same_config(tmp_path):
    store = RunStore(tmp_path / "runs.duckdb")
    store.create_run("a", {"seed": 1}, [], None)
    assert store.finished_run({"seed": 1}) is None  # still running
    store.set_status("a", "finished")
    store.create_run("b", {"seed": 2}, [], None)
    store.set_status("b", "failed", "boom")
    assert store.finished_run({"seed": 1}) == "a"
    assert store.finished_run({"seed": 2}) is None
    assert store.finished_run({"seed": 3}) is None


def _rollouts(step: int) -> list[RolloutRow]:
    return [RolloutRow(p, 0, t, f"state {p} <think>", f"z{step}", "Up", -0.1 * t)
            for p in range(2) for t in range(2)]


def test_rollouts_round_trip_replace_and_truncate(store: RunStore) -> None:
    store.create_run("r", {}, [], None)
    for step in range(1, 4):
        store.record_step("r", step, {"loss": 1.0}, rollouts=_rollouts(step))
    assert store.rollouts("r", 2)[1] == {
        "step": 2, "prompt_index": 0, "sample_index": 0, "turn": 1,
        "prompt": "state 0 <think>", "reasoning": "z2", "action": "Up", "reward": -0.1,
        "images": [],  # a text turn shows no picture
    }  # fmt: skip
    store.record_step("r", 2, {"loss": 2.0}, rollouts=_rollouts(20)[:1])  # a re-recorded step
    assert [r["reasoning"] for r in store.rollouts("r", 2)] == ["z20"]
    store.truncate_after("r", 1)  # a resume point
    assert {r["step"] for r in store.rollouts("r")} == {1}
    assert len(store.rollouts("r")) == 4


def test_a_turns_pictures_round_trip_as_png_bytes(store: RunStore) -> None:
    from mirage.core.rl.image import IMAGE_MARK, Image

    pictures = [Image.from_array(np.full((16, 32, 3), shade, dtype=np.uint8)) for shade in (0, 200)]
    store.create_run("r", {}, [], None)
    rows = [RolloutRow(0, 0, 0, f"{IMAGE_MARK} <think>", "z", "Up", 0.0, (pictures[0].png,)),
            RolloutRow(0, 0, 1, f"{IMAGE_MARK} {IMAGE_MARK} <think>", "z", "Up", 1.0,
                       tuple(p.png for p in pictures)),
            RolloutRow(1, 0, 0, "state <think>", "z", "Up", 0.0)]
    store.record_step("r", 1, {}, rollouts=rows)
    stored = store.rollouts("r")
    assert [r["images"] for r in stored] == [[pictures[0].png], [p.png for p in pictures], []]
    assert Image(stored[1]["images"][1]) == pictures[1]


@pytest.mark.parametrize("images, error, message", [
    (("not bytes",), TypeError, "PNG bytes \\(an Image's .png\\), not str"),
    ((b"GIF89a",), ValueError, "6 bytes without the PNG signature"),
])
def test_a_picture_that_is_not_png_bytes_is_refused_and_nothing_is_written(store, images, error, message):
    store.create_run("r", {}, [], None)
    with pytest.raises(error, match=message):
        store.record_step("r", 1, {"loss": 1.0}, rollouts=[RolloutRow(0, 0, 0, "x", "z", "Up", 0.0, images)])
    assert store.rollouts("r") == [] and store.metrics("r") == []


def test_schema_1_store_gains_the_rollouts_table(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    RunStore(path).create_run("old", {}, [], None)
    with duckdb.connect(str(path)) as con:  # as a store written before the rollouts table
        con.execute("DROP TABLE rollouts")
        con.execute("UPDATE schema_version SET version = 1")
    store = RunStore(path)
    assert store.get_run("old") is not None and store.rollouts("old") == []
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]

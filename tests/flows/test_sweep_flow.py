"""The sweep flow in this process against a real Prefect server: a failing cell, and two
cells on a local Ray through prefect-ray's task runner."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from mirage.core.store.run_store import RunStore
from mirage.flows.progress import read_sweeps
from mirage.flows.sweep_store import SweepStore

REPO = Path(__file__).resolve().parents[2]
SHRINK = {"settings": {"filter.name": "top_p", "steps": 2, "threads": 1}, "preset": "tiny"}


def runs_of(db: Path) -> list[dict]:
    return RunStore(db).list_runs()


@pytest.mark.slow
@pytest.mark.xdist_group("busy")  # on the worker whose session Prefect server the deployment and Ray tests use
def test_a_failing_cell_is_recorded_while_the_other_finishes(prefect_server, tmp_path, monkeypatch):
    from mirage.flows.sweep import sweep

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    broken = tmp_path / "broken-model"  # a checkpoint directory whose weights do not load
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "qwen2"}')
    (broken / "model.safetensors").write_text("not safetensors")
    db = tmp_path / "runs" / "main.duckdb"
    with prefect_server.settings():
        state = sweep("stochasticity", grid={"model.path": [None, str(broken)]},
                      settings={**SHRINK["settings"], "env.options.slip": 0.0}, preset="tiny",
                      runner="thread", width=2, db=str(db), registry=str(REPO / "registry.yaml"),
                      return_state=True)
    assert state.is_failed()
    runs = {r["cell"]: r for r in runs_of(db)}
    reason = runs[f"model.path={broken}"]["error"].splitlines()[0]
    # The final state's message (what `prefect deployment run --watch` prints) says why.
    assert state.message == ("stochasticity: 2 cells: 1 run, 0 loaded, 0 reused, 1 failed; "
                             f"first failure: model.path={broken} seed=0: {reason}")
    assert set(runs) == {"model.path=null", f"model.path={broken}"}
    good, bad = runs["model.path=null"], runs[f"model.path={broken}"]
    assert (good["status"], good["experiment"], good["seed"]) == ("finished", "stochasticity", 0)
    assert RunStore(db).metrics(good["run_id"], "val/success")  # its steps were loaded
    assert (bad["status"], bad["experiment"], bad["seed"]) == ("failed", "stochasticity", 0)
    assert "SafetensorError" in bad["error"]
    summary = {r["cell"]: r for r in SweepStore(db).sweep_cells()}
    assert summary[f"model.path={broken}"]["status"] == "failed"
    assert summary[f"model.path={broken}"]["error"] == bad["error"]
    assert summary["model.path=null"]["success"] is not None
    (recorded,) = read_sweeps(db)  # the sweep's own row: ended, with the same message
    assert (recorded.state, recorded.message) == ("failed", state.message)
    assert recorded.counts() == {"finished": 1, "failed": 1, "stopped": 0, "running": 0, "pending": 0}


@pytest.mark.slow
@pytest.mark.xdist_group("busy")  # on the worker whose session Prefect server the deployment and Ray tests use
def test_a_bad_setting_fails_the_flow_with_a_one_line_reason(prefect_server, tmp_path):
    from mirage.flows.sweep import sweep

    db = tmp_path / "main.duckdb"
    with prefect_server.settings():
        state = sweep("stochasticity", settings={"filter.name": "nope"}, db=str(db),
                      registry=str(REPO / "registry.yaml"), return_state=True)
    assert state.is_failed()
    assert state.message.startswith("stochasticity: experiment 'stochasticity' cannot start: ")
    assert "unknown filter 'nope'; valid: " in state.message and "\n" not in state.message
    assert not db.exists()  # refused before the store was touched


def ray_processes() -> set[int]:
    found = set()
    for process in psutil.process_iter(["name", "cmdline"]):
        text = " ".join([process.info["name"] or ""] + (process.info["cmdline"] or []))
        if any(mark in text for mark in ("raylet", "gcs_server", "ray::", "default_worker.py")):
            found.add(process.pid)
    return found


def exits_late(pid: int, grace: float = 60.0) -> bool:
    """Whether a process is still there ``grace`` seconds on (then it is killed): Ray's
    workers exit a moment after ``ray.shutdown()`` returns, slower on a busy machine."""
    try:
        process = psutil.Process(pid)
        process.wait(timeout=grace)
        return False
    except psutil.NoSuchProcess:
        return False
    except psutil.TimeoutExpired:
        process.kill()
        return True


@pytest.mark.slow
@pytest.mark.xdist_group("busy")  # busy processes: one such test at a time
def test_two_cells_run_on_a_local_ray(prefect_server, tmp_path, monkeypatch):
    import ray

    from mirage.flows.sweep import sweep

    for key, value in prefect_server.env().items():  # Ray's processes inherit these
        if key.startswith(("PREFECT_", "RAY_")):
            monkeypatch.setenv(key, value)
    before = ray_processes()
    db = tmp_path / "runs" / "main.duckdb"
    try:
        with prefect_server.settings():
            state = sweep("stochasticity", grid={"env.options.slip": [0.0, 0.5]}, runner="ray",
                          ray_address="local", width=2, db=str(db), registry=str(REPO / "registry.yaml"),
                          return_state=True, **SHRINK)
        assert state.is_completed(), state.message
        assert state.message == "stochasticity: 2 cells: 2 run, 0 loaded, 0 reused, 0 failed"
        runs = runs_of(db)
        assert sorted(r["cell"] for r in runs) == ["env.options.slip=0.0", "env.options.slip=0.5"]
        assert all(r["status"] == "finished" and r["experiment"] == "stochasticity" for r in runs)
        events = [e["kind"] for r in runs for e in RunStore(db).events(r["run_id"])]
        assert events.count("backend") == 2
    finally:
        if ray.is_initialized():
            ray.shutdown()
        left = [pid for pid in ray_processes() - before if exits_late(pid)]
    assert not ray.is_initialized()
    assert not left, f"Ray processes left behind: {left}"

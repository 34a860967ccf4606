"""``core run --parallel ddp --nproc N`` / ``--launcher ray``: one run on several processes
stores what the one-process run stores; a killed rank fails the run with its error, leaves
no process behind, and the resume (on another number of processes) gives the metrics of
the run that was never interrupted. Refusals come before any process starts."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from mirage.core.run.launch import failure_report
from mirage.core.store.run_store import RunStore
from shared_runs import two_torchrun_processes

DDP = ("--parallel", "ddp", "--quiet")


def stored_metrics(db: Path) -> dict[str, float]:
    store = RunStore(db)
    (run,) = store.list_runs()
    return {f"{step}:{name}": value for step, name, value in store.metrics(run["run_id"])
            if not name.startswith("time/")}


def assert_same_metrics(got: dict[str, float], expected: dict[str, float]) -> None:
    """The same names, values equal within float32's 1e-5 (the shares' batches pad
    differently, which moves float32 sums in their last bits)."""
    assert got.keys() == expected.keys()
    different = {name: (expected[name], got[name]) for name in expected
                 if not math.isclose(got[name], expected[name], rel_tol=1e-5, abs_tol=1e-5)}
    assert not different


@pytest.fixture
def run_ddp(cli, tiny_config_file, tmp_path):
    def run(name: str, *args: str) -> tuple[Path, tuple[int, str, str]]:
        db = tmp_path / f"{name}.duckdb"
        return db, cli("run", "--config", tiny_config_file, "--db", db, *DDP, *args, timeout=600)
    return run


@pytest.fixture(scope="session")  # never rebuilt, wherever xdist interleaves the module's tests
def baselines() -> dict[tuple[str, ...], dict[str, float]]:
    return {}


@pytest.fixture
def one_process(baselines, run_ddp):
    """``one_process(*args)``: the stored metrics of the one-process ddp run with ``args``,
    run once per test process (xdist worker) and reused by the module's tests."""
    def metrics(*args: str) -> dict[str, float]:
        if args not in baselines:
            db, (code, out, err) = run_ddp(f"one-{len(baselines)}", *args)
            assert code == 0, err
            baselines[args] = stored_metrics(db)
        return baselines[args]
    return metrics


# the end-to-end runs share their one-process baselines: on one worker, one at a time with
# the suite's other busy tests (tests/conftest.py)
SHARED = pytest.mark.xdist_group("busy")


@pytest.mark.slow
@SHARED
def test_two_torchrun_processes_store_the_metrics_of_one(tmp_path_factory, cli_argv, tiny_config_file, one_process):
    # the run whose sockets tests/core/test_listening_sockets.py checks (tests/shared_runs.py)
    run = two_torchrun_processes(tmp_path_factory, cli_argv, tiny_config_file)
    assert run.code == 0, run.err
    two = run.db
    assert_same_metrics(stored_metrics(two), one_process("--steps", "3"))
    store = RunStore(two)
    (run,) = store.list_runs()
    events = {e["kind"]: e["message"] for e in store.events(run["run_id"])}
    assert [r["rank"] for r in json.loads(events["ranks"])] == [0, 1]
    assert json.loads(events["backend"])["world_size"] == 2
    assert {name for _, name, _ in store.metrics(run["run_id"])} >= {"time/communication", "time/step"}


@pytest.mark.slow
@SHARED
def test_two_ray_train_workers_store_the_metrics_of_one(run_ddp, one_process):
    # a local Ray listens on every interface: it starts only when asked for by name
    two, (code, out, err) = run_ddp("ray", "--steps", "3", "--nproc", "2", "--launcher", "ray",
                                    "--ray-address", "local")
    assert code == 0, err
    assert_same_metrics(stored_metrics(two), one_process("--steps", "3"))


# image mode (issue 42): a small visual policy, warm-started once in the run's cache; one
# step (the validation before it, a rollout, the MI cross-scoring, an update whose gradient
# norm is the all-reduced one): what image mode adds to the text runs' checks above
IMAGE = ("--steps", "1", "--filter", "none", "--set", "env.options.observation=image",
         "--set", "model.options.vision_hidden=16", "--set", "model.options.vision_layers=1",
         "--set", "model.options.warmstart_episodes=20", "--set", "model.options.warmstart_steps=5",
         "--set", "rollout.max_new_tokens=40")


@pytest.mark.slow
@SHARED
def test_image_runs_on_two_processes_store_the_metrics_of_one(run_ddp, one_process):
    """Each rank's share of the rows carries its pictures (a prompt's ids and pictures travel
    together), and the MI cross-scoring gathers them: two processes store what one stores."""
    two, (code, out, err) = run_ddp("image-two", *IMAGE, "--nproc", "2")
    assert code == 0, err
    one = one_process(*IMAGE)
    assert_same_metrics(stored_metrics(two), one)
    assert all(name.split(":")[1] != "update/grad_norm" or value > 0 for name, value in one.items())
    assert any(name.endswith(":mi/first_turn/retrieval_acc") for name in one)


# LoRA (issue 44): only the adapters' gradients are summed, the critic's adapter beside them;
# two steps: the second samples from the adapters the first updated on every rank
LORA = ("--steps", "2", "--filter", "none", "--algo", "ppo", "--set", "model.lora.rank=4",
        "--set", "algorithm.kl_coef=0.05")


@pytest.mark.slow
@SHARED
def test_lora_runs_on_two_processes_store_the_metrics_of_one(run_ddp, one_process):
    two, (code, out, err) = run_ddp("lora-two", *LORA, "--nproc", "2")
    assert code == 0, err
    one = one_process(*LORA)
    assert_same_metrics(stored_metrics(two), one)
    assert all(name.split(":")[1] != "update/grad_norm" or value > 0 for name, value in one.items())
    (run,) = RunStore(two).list_runs()
    facts = json.loads(next(e["message"] for e in RunStore(two).events(run["run_id"]) if e["kind"] == "backend"))
    assert facts["lora_rank"] == 4 and 0 < facts["lora_parameters"] < facts["parameters"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (dead, not yet reaped) is no process left running
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@SHARED
def test_a_killed_rank_fails_the_run_and_the_resume_reproduces_it(cli, cli_argv, one_process, tiny_config_file,
                                                                  tmp_path):
    """No filter, so every step updates: the resume restores the optimizer's state too."""
    db = tmp_path / "killed.duckdb"
    proc = subprocess.Popen(cli_argv("run", "--config", tiny_config_file, "--db", db, *DDP, "--steps", "6",
                                     "--filter", "none", "--nproc", "2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            runs = RunStore(db).list_runs() if db.exists() else []
            if runs and (runs[0]["last_step"] or 0) >= 2:
                break
            time.sleep(0.1)
        run_id = runs[0]["run_id"]
        ranks = json.loads(next(e["message"] for e in RunStore(db).events(run_id) if e["kind"] == "ranks"))
        os.kill(ranks[1]["pid"], signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    assert f"failed: run {run_id}: rank 1 failed: killed by SIGKILL (pid {ranks[1]['pid']})" in err
    row = RunStore(db).get_run(run_id)
    assert row["status"] == "failed" and row["error"].startswith("rank 1 failed: killed by SIGKILL")
    assert any(e["kind"] == "rank_error" and "rank 1" in e["message"] for e in RunStore(db).events(run_id))
    deadline = time.monotonic() + 30
    while any(_alive(r["pid"]) for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [r["pid"] for r in ranks if _alive(r["pid"])], "a rank outlived the run"

    code, out, err = cli("run", "--resume", run_id, "--db", db, "--quiet", timeout=600)  # one process now
    assert code == 0, err
    assert RunStore(db).get_run(run_id)["status"] == "finished"
    assert_same_metrics(stored_metrics(db), one_process("--steps", "6", "--filter", "none"))


def test_runs_on_several_processes_are_refused_cleanly_before_any_starts(cli, tiny_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    for args, message in [
        (("--nproc", "2"), "--nproc 2 splits the run across processes, which needs model.parallel: ddp"),
        (("--launcher", "ray"), "--nproc 1 --launcher ray splits the run across processes"),
        (("--parallel", "ddp", "--nproc", "0"), "--nproc 0: expected a whole number of processes >= 1"),
        (("--parallel", "ddp", "--launcher", "slurm"), "--launcher 'slurm': unknown; valid: torchrun, ray"),
        (("--parallel", "ddp", "--ray-address", "ray://x:1"), "--ray-address names the cluster of --launcher ray"),
        (("--parallel", "ddp", "--nproc", "2", "--launcher", "ray"),
         "--launcher ray without --ray-address would start a local Ray, whose servers listen on every interface"),
        (("--parallel", "ddp", "--launcher", "ray", "--ray-address", " "), "--ray-address: empty"),
        (("--parallel", "zero3"), "zero3"),
    ]:
        code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--quiet", *args)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not db.exists()  # nothing was written


def test_a_rank_error_is_reported_with_its_rank_and_traceback(tmp_path):
    error_file = tmp_path / "error.json"
    error_file.write_text(json.dumps({"message": {
        "message": "ValueError: the environment broke",
        "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  ...\nValueError: the environment broke\n",
                      "timestamp": "100"}}}))
    raised = ProcessFailure(local_rank=1, pid=4242, exitcode=1, error_file=str(error_file))
    killed = ProcessFailure(local_rank=0, pid=4241, exitcode=-signal.SIGKILL, error_file="")
    reason, details = failure_report(ChildFailedError("mirage", {1: raised}))
    assert reason == "rank 1 failed: ValueError: the environment broke"
    assert "rank 1 (pid 4242)" in details and "Traceback" in details
    # a killed rank is the cause, whatever the others raised after it
    reason, details = failure_report(ChildFailedError("mirage", {1: raised, 0: killed}))
    assert reason == "rank 0 failed: killed by SIGKILL (pid 4241)"
    assert details.index("rank 0") < details.index("rank 1")


@pytest.mark.slow
@SHARED
def test_fsdp_runs_equal_one_process_and_resume_on_any_number_of_processes(cli, one_process, tiny_config_file,
                                                                           tmp_path):
    """``parallel: fsdp`` on two processes, extended from its checkpoints on one process and
    then on two again (the optimizer state gathered from the shards, and back), stores what
    one uninterrupted process stores (the extensions end on validation steps, as the
    uninterrupted run validates); every step updates (no filter)."""
    def run(name: str, parallel: str, segments: list[tuple[int, int]]) -> Path:
        db = tmp_path / f"{name}.duckdb"
        for index, (steps, nproc) in enumerate(segments):
            args = ["--steps", str(steps), "--nproc", str(nproc)]
            if index == 0:
                args += ["--config", str(tiny_config_file), "--parallel", parallel, "--filter", "none"]
            else:
                args += ["--resume", RunStore(db).list_runs()[0]["run_id"]]
            code, out, err = cli("run", "--db", db, "--quiet", *args, timeout=600)
            assert code == 0, err
        return db

    one = one_process("--steps", "6", "--filter", "none")  # ddp on one process
    sharded = run("fsdp", "fsdp", [(2, 2), (4, 1), (6, 2)])
    assert_same_metrics(stored_metrics(sharded), one)
    assert all(name.split(":")[1] != "update/grad_norm" or value > 0 for name, value in one.items())

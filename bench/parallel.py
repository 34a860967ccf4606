"""Data-parallel runs: iteration time on 1 and on N processes side by side, and the share
of a step the processes spend exchanging data.

Runs short ``model.parallel: ddp`` runs of the default config (warm start cached after the
first build), interleaved: one process with N threads, N processes (torchrun's launcher)
with one thread each, and one process with one thread, ``--repeats`` rounds. Each arm
uses the machine's N cores. Prints the median seconds of each stage over every training
step of every round, the ratio to one process with N threads, and ``time/communication``
(collectives between the processes) as a share of ``time/step``. Every arm samples the
same batches (per-trajectory streams), so the arms do the same work. Numbers, not
pass/fail.

On a 2-core machine expect little: the two processes share the cores that one process's
two threads would use, and they add the gathers and the gradient all-reduce; the gain of
data parallelism is on several GPUs or machines (docs/scaling.md).

    .venv/bin/python bench/parallel.py [--nproc 2] [--steps 3] [--repeats 2] [--env sokoban] [--parallel fsdp]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from mirage.core.run import threads
from mirage.core.run.launch import launch, make_job
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore, new_run_id

STAGES = ["time/rollout", "time/score", "time/diagnose", "time/filter", "time/update", "time/step"]


def run_once(data: dict, db: Path, nproc: int, threads_each: int) -> dict[str, list[float]]:
    """One run; each stage's seconds at every training step."""
    config = build_config({**data, "threads": threads_each})
    run_id = new_run_id()
    if nproc == 1:
        execute(config, db, progress=False, run_id=run_id)
    else:
        status, error = launch(make_job(nproc, db=db, run_id=run_id, config=config, progress=False,
                                        threads_setting=threads_each), nproc)
        if status != "finished":
            raise SystemExit(f"the {nproc}-process run {status}: {error}")
    times: dict[str, list[float]] = {}
    for step, name, value in RunStore(db).metrics(run_id):
        if step > 0 and name.startswith("time/"):
            times.setdefault(name, []).append(value)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=max(2, threads.usable_cpus()))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--env", default=None, help="environment [default: RunConfig's]")
    parser.add_argument("--parallel", default="ddp", choices=["ddp", "fsdp"], help="model.parallel of every arm")
    args = parser.parse_args()
    data: dict = {"seed": 0, "steps": args.steps, "model": {"parallel": args.parallel},
                  "validation": {"every": 10_000, "episodes": 1, "greedy": False}}  # steps, not validation
    if args.env:
        data["env"] = {"name": args.env}
    arms = [(1, args.nproc), (args.nproc, 1), (1, 1)]  # (processes, threads each)
    label = {arm: f"{arm[0]} proc x {arm[1]} thr" for arm in arms}
    times: dict[tuple[int, int], dict[str, list[float]]] = {arm: {} for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        run_once(data, Path(tmp) / "warm.duckdb", 1, 1)  # builds the warm start (cached), not counted
        for repeat in range(args.repeats):
            for arm in arms:
                got = run_once(data, Path(tmp) / f"r{repeat}-{arm[0]}x{arm[1]}.duckdb", *arm)
                for name, values in got.items():
                    times[arm].setdefault(name, []).extend(values)
    config = build_config(data)
    print(f"{config.env.name}, P x G = {config.rollout.prompts} x {config.rollout.group_size}, "
          f"model.parallel {args.parallel}, {args.steps} steps x {args.repeats} interleaved rounds; "
          "medians over training steps")
    print(f"{'stage':<14}" + "".join(f"{label[arm] + ' s':>20}" for arm in arms) + f"{'ratio':>8}")
    base, parallel = arms[0], arms[1]
    for stage in STAGES:
        if not all(times[arm].get(stage) for arm in arms):
            continue  # not measured at these steps (diagnostics every 5 steps by default)
        medians = [statistics.median(times[arm][stage]) for arm in arms]
        ratio = medians[1] / medians[0] if medians[0] else float("nan")
        print(f"{stage[5:]:<14}" + "".join(f"{m:>20.2f}" for m in medians) + f"{ratio:>7.2f}x")
    shares = [c / s for c, s in zip(times[parallel]["time/communication"], times[parallel]["time/step"])]
    print(f"communication: median {statistics.median(shares):.1%} of a step at {args.nproc} processes "
          f"(min {min(shares):.1%}, max {max(shares):.1%}); ratio: {label[parallel]} / {label[base]} "
          "(below 1: the processes are faster)")


if __name__ == "__main__":
    main()

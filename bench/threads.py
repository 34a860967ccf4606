"""Torch threads: 1 against N side by side, per stage of an iteration, and what
``threads: auto`` would choose on this machine now.

Builds the default run (warm start cached after the first call), then runs iterations
(rollout, score, filter, update; no diagnostics) alternating the thread count in one
process: 1, N, 1, N, ... ``--repeats`` times each, every iteration from the same policy
and seed (the policy is restored after each). Prints the median seconds of each stage at
each count and the ratio N / 1 (above 1: N threads is slower). Run it on an idle machine
and on a busy one (e.g. beside a sweep): the policy must not lose to 1 thread in either.
Numbers, not pass/fail.

    .venv/bin/python bench/threads.py [--threads 2] [--repeats 5] [--env sokoban]
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch

from mirage.core.run import threads
from mirage.core.run.loop import run_step
from common import prepared_session  # bench/common.py, beside this script

STAGES = ["time/rollout", "time/score", "time/update", "time/step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=threads.usable_cpus(), help="N [default: usable CPUs]")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--env", default=None, help="environment [default: RunConfig's]")
    args = parser.parse_args()
    auto = threads.choose("auto")
    data: dict = {"seed": 0, "threads": 1, "diagnostics": {"names": []}}
    if args.env:
        data["env"] = {"name": args.env}
    session = prepared_session(data)
    config, backend = session.config, session.backend
    start = copy.deepcopy(backend.model.state_dict()), copy.deepcopy(backend.optimizer.state_dict())
    counts = [1, args.threads]
    times = {n: {stage: [] for stage in STAGES} for n in counts}
    for repeat in range(args.repeats + 1):  # the first round warms up and is not counted
        for n in counts:
            torch.set_num_threads(n)
            backend.model.load_state_dict(start[0])
            backend.optimizer.load_state_dict(start[1])
            metrics, _ = run_step(session, 1)
            if repeat:
                for stage in STAGES:
                    times[n][stage].append(metrics[stage])
    print(f"{config.env.name}, P x G = {config.rollout.prompts} x {config.rollout.group_size}, "
          f"{args.repeats} interleaved repeats; threads: auto here now -> {auto.count} ({auto.reason})")
    print(f"{'stage':<10} {'1 thread s':>11} {f'{args.threads} threads s':>12} {'ratio':>6}")
    for stage in STAGES:
        one, many = (statistics.median(times[n][stage]) for n in counts)
        ratios = [b / a for a, b in zip(times[1][stage], times[args.threads][stage])]
        print(f"{stage[5:]:<10} {one:>11.2f} {many:>12.2f} {statistics.median(ratios):>5.2f}x")


if __name__ == "__main__":
    main()

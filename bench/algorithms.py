"""PPO, GRPO, DAPO and Dr. GRPO on FrozenLake: validation success after the warm start and
after a fixed number of iterations, per seed.

Each (algorithm, seed) cell is one run through ``mirage.core.run.loop.execute`` with the
default settings on FrozenLake (slip 0) and ``--filter none`` by default (the algorithms
alone; DAPO's dynamic sampling then has zero-variance groups to drop). The warm start is
shared across algorithms of one seed (its cache). Runs already finished in ``--db`` with
the same config are reused, so an interrupted bench resumes. ``--tiny`` runs the test
suite's tiny config for 2 steps: a check that the bench works, not a measurement.

    .venv/bin/python -u bench/algorithms.py [--steps N] [--seeds 0 1 2] [--filter none]
    .venv/bin/python -u bench/algorithms.py --tiny
"""

from __future__ import annotations

import argparse
import copy
import statistics
from pathlib import Path

from mirage.core.config import presets
from mirage.core.config.run_config import RunConfig
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore

ALGORITHMS = ["ppo", "grpo", "dapo", "drgrpo"]
SHOWN = [("val/success", "t=0.5"), ("val_greedy/success", "greedy")]
# The test suite's tiny config (mirage/core/config/presets.py), 2 steps: seconds per run.
TINY = {**copy.deepcopy(presets.TINY), "steps": 2}


def cell_config(algo: str, seed: int, args: argparse.Namespace) -> RunConfig:
    data = copy.deepcopy(TINY) if args.tiny else {}
    data |= {"env": {"name": "frozenlake"}, "filter": {"name": args.filter},
             "algorithm": {"name": algo}, "seed": seed}
    if args.steps:
        data["steps"] = args.steps
    if args.threads:
        data["threads"] = args.threads
    return build_config(data)



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="iterations [default: the config's]")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--filter", default="none", help="filter for every run [default: none]")
    parser.add_argument("--algos", nargs="+", default=ALGORITHMS)
    parser.add_argument("--tiny", action="store_true", help="tiny config, 2 steps: does the bench work?")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run [default: the config's]")
    parser.add_argument("--db", type=Path, default=None,
                        help="run store [default: bench/algorithms.duckdb, or bench/algorithms-tiny.duckdb]")
    args = parser.parse_args()
    db = args.db or Path("bench/algorithms-tiny.duckdb" if args.tiny else "bench/algorithms.duckdb")

    store = RunStore(db)
    results: dict[str, list[dict[str, float]]] = {}
    for seed in args.seeds:  # seed-major: one warm start serves every algorithm in turn
        for algo in args.algos:
            config = cell_config(algo, seed, args)
            run_id = store.finished_run(config.model_dump(mode="json")) or execute(config, db, progress=not args.tiny)
            metrics = store.metrics(run_id)
            last = max(step for step, _, _ in metrics)
            values = {f"{name}@{step}": value for step, name, value in metrics if step in (0, last)}
            values["last"] = last
            results.setdefault(algo, []).append(values)
            print(f"{algo} seed {seed}: run {run_id}", flush=True)

    steps = sorted({int(r["last"]) for rows in results.values() for r in rows})
    print(f"\nFrozenLake, filter {args.filter}, seeds {' '.join(map(str, args.seeds))}, "
          f"validation success after the warm start (step 0) and after step {'/'.join(map(str, steps))}")
    header = f"{'algo':<7} {'metric':<7} {'warm start (per seed)':<24} {'after RL (per seed)':<24} {'gain':>7}"
    print(header)
    print("-" * len(header))
    fmt = lambda xs: " ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    for algo, rows in results.items():
        for name, label in SHOWN:
            before = [r[f"{name}@0"] for r in rows]
            after = [r[f"{name}@{int(r['last'])}"] for r in rows]
            gain = statistics.fmean(after) - statistics.fmean(before)
            print(f"{algo:<7} {label:<7} {fmt(before):<24} {fmt(after):<24} {gain:>+7.3f}")


if __name__ == "__main__":
    main()

"""Is learning real? Validation success after the warm start and after RL, per seed.

Runs the cells of the ``learning`` experiment in registry.yaml (FrozenLake slip 0 and
Sokoban, 3 seeds each, default settings) and prints, side by side, greedy and
temperature-0.5 success at step 0 (warm start) and at the last step, with the first-turn
retrieval accuracy of the warm-started policy against its chance level. Runs already
finished in ``--db`` with the same config are reused, so an interrupted bench resumes.

    .venv/bin/python bench/learning.py [--steps N] [--db bench/learning.duckdb]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from mirage.core.experiments import load_registry
from mirage.core.loop import execute
from mirage.core.store import RunStore

SHOWN = [
    ("val_greedy/success", "greedy"),
    ("val/success", "t=0.5"),
]



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="override the config's steps")
    parser.add_argument("--db", type=Path, default=Path("bench/learning.duckdb"))
    parser.add_argument("--experiment", default="learning")
    args = parser.parse_args()

    store = RunStore(args.db)
    results: dict[str, list[dict[str, float]]] = {}
    for point, config in load_registry()[args.experiment].cells():
        if args.steps:
            config = config.model_copy(update={"steps": args.steps})
        run_id = store.finished_run(config.model_dump(mode="json")) or execute(config, args.db, progress=True)
        metrics = store.metrics(run_id)
        last = max(step for step, _, _ in metrics)
        values = {f"{name}@{step}": value for step, name, value in metrics if step in (0, last)}
        values["last"] = last
        results.setdefault(config.env.name, []).append(values)
        print(f"{config.env.name} seed {config.seed}: run {run_id}", flush=True)

    print()
    header = f"{'env':<11} {'metric':<8} {'warm start (per seed)':<24} {'after RL (per seed)':<24} {'gain':>6} {'seed spread':>11}"
    print(header)
    print("-" * len(header))
    for env, rows in results.items():
        for name, label in SHOWN:
            before = [r[f"{name}@0"] for r in rows]
            after = [r[f"{name}@{int(r['last'])}"] for r in rows]
            gain = statistics.fmean(after) - statistics.fmean(before)
            spread = max(max(before) - min(before), max(after) - min(after))
            fmt = lambda xs: " ".join(f"{x:.2f}" for x in xs)  # noqa: E731
            print(f"{env:<11} {label:<8} {fmt(before):<24} {fmt(after):<24} {gain:>+6.3f} {spread:>11.3f}")
        retrieval = [r["mi/first_turn/retrieval_acc@0"] for r in rows]
        chance = rows[0]["mi/first_turn/retrieval_chance@0"]
        print(f"{env:<11} first-turn retrieval accuracy of the warm start: "
              f"{' '.join(f'{x:.2f}' for x in retrieval)} (chance {chance:.3f})")
    print(f"\nsteps per run: {', '.join(str(int(r['last'])) for rows in results.values() for r in rows)}")


if __name__ == "__main__":
    main()

"""Is learning real? Validation success after the warm start and after RL, per seed.

Runs the cells of a registry.yaml experiment through the sweep flow, two at a time on
the 2-core machine (default ``learning_long``: FrozenLake slip 0 and Sokoban, default
options and algorithm, top-p 0.9, 250 iterations on Sokoban and 150 on FrozenLake, 3
seeds: roughly two hours here with no warm start cached, a Sokoban run being 11-12
minutes of warm start and 42-44 of RL; ``--experiment learning`` is the same at the
built-in 40 iterations), then prints, side by side, greedy and temperature-0.5 success
at step 0 (warm start) and at the last step, with the first-turn retrieval accuracy of
the warm-started policy against its chance level. Cells already finished in ``--db``
with the same config are reused, so an interrupted bench resumes.

    .venv/bin/python bench/learning.py [--experiment NAME] [--width 2] [--db bench/learning.duckdb]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from mirage.core.store.run_store import RunStore
from mirage.flows.cells import plan_cells
from mirage.flows.sweep import sweep

SHOWN = [
    ("val_greedy/success", "greedy"),
    ("val/success", "t=0.5"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="learning_long")
    parser.add_argument("--width", type=int, default=2, help="cells at once")
    parser.add_argument("--db", type=Path, default=Path("bench/learning.duckdb"))
    args = parser.parse_args()

    sweep(args.experiment, width=args.width, db=str(args.db), return_state=True)
    store = RunStore(args.db)
    results: dict[str, list[dict[str, float]]] = {}
    for spec in plan_cells(args.experiment):
        run_id = store.finished_run(spec.config)
        if run_id is None:
            print(f"{spec.cell} seed {spec.seed}: no finished run (see the sweep's summary)")
            continue
        metrics = store.metrics(run_id)
        last = max(step for step, _, _ in metrics)
        values = {f"{name}@{step}": value for step, name, value in metrics if step in (0, last)}
        values["last"] = last
        env = spec.config["env"]["name"]
        results.setdefault(env, []).append(values)
        print(f"{env} seed {spec.seed}: run {run_id} ({json.dumps(spec.config['env']['options'])})")

    print()
    header = (f"{'env':<11} {'metric':<8} {'warm start (per seed)':<24} {'after RL (per seed)':<24} "
              f"{'gain':>6} {'seed spread':>11}  gain > spread")
    print(header)
    print("-" * len(header))
    for env, rows in results.items():
        for name, label in SHOWN:
            before = [r[f"{name}@0"] for r in rows]
            after = [r[f"{name}@{int(r['last'])}"] for r in rows]
            gain = statistics.fmean(after) - statistics.fmean(before)
            spread = max(max(before) - min(before), max(after) - min(after))
            fmt = lambda xs: " ".join(f"{x:.2f}" for x in xs)  # noqa: E731
            print(f"{env:<11} {label:<8} {fmt(before):<24} {fmt(after):<24} {gain:>+6.3f} {spread:>11.3f}"
                  f"  {'yes' if gain > spread else 'no'}")
        retrieval = [r["mi/first_turn/retrieval_acc@0"] for r in rows]
        chance = rows[0]["mi/first_turn/retrieval_chance@0"]
        print(f"{env:<11} first-turn retrieval accuracy of the warm start: "
              f"{' '.join(f'{x:.2f}' for x in retrieval)} (chance {chance:.3f})")
    print(f"\nsteps per run: {', '.join(str(int(r['last'])) for rows in results.values() for r in rows)}")


if __name__ == "__main__":
    main()

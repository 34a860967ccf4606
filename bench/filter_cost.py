"""What filtering costs and saves per iteration: --filter none vs --filter top_p --rho 0.9.

Runs both in this process (``mirage.core.run.loop.execute``) on the same settings and seed,
with a temporary run store and the warm-start cache of ``$MIRAGE_CACHE`` (built once,
shared by both), and prints side by side the mean seconds per iteration and per stage,
the filter's own share of the iteration (the paper: under 0.1%), the kept groups and the
update time per kept group (the update sees only kept groups, so its time should fall
with the kept share). Means are over steps 1..N; step 0 has no filter or update.

Everything but the filter is RunConfig's default (or, with ``--tiny``, the test suite's
tiny model). Validation is cut to one episode (it is not part of ``time/step``),
diagnostics are off (they are, but cost the same with or without a filter) and the
empty-step stop is lifted (it would end a run early). Numbers, not pass/fail.

    .venv/bin/python bench/filter_cost.py [--steps 5] [--env sokoban] [--tiny]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
from pathlib import Path

from mirage.core.config import presets
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore

TINY_MODEL = presets.TINY["model"]  # the test suite's tiny model
CASES = [("none", {"name": "none"}), ("top_p 0.9", {"name": "top_p", "rho": 0.9})]
STAGES = ["time/rollout", "time/score", "time/filter", "time/update", "time/step"]


def config_data(args: argparse.Namespace, filter_options: dict) -> dict:
    data = {
        "env": {"name": args.env},
        "steps": args.steps,
        "seed": args.seed,
        "filter": filter_options,
        "max_empty_steps": args.steps + 1,
        "validation": {"episodes": 1, "every": args.steps},
        "diagnostics": {"names": []},
    }
    if args.tiny:
        data["model"] = dict(TINY_MODEL)
    return data


def measure(store: RunStore, run_id: str) -> dict[str, float]:
    """Means over steps >= 1 of the stage times and kept groups, and update seconds per
    kept group (over the steps that kept something)."""
    by_step: dict[int, dict[str, float]] = {}
    for step, name, value in store.metrics(run_id):
        if step >= 1:
            by_step.setdefault(step, {})[name] = value
    steps = list(by_step.values())
    out = {name: statistics.fmean(s.get(name, 0.0) for s in steps) for name in STAGES}
    out["kept_groups"] = statistics.fmean(s["filter/kept_groups"] for s in steps)
    out["kept_ratio"] = statistics.fmean(s["filter/kept_ratio"] for s in steps)
    trained = [s for s in steps if s["filter/kept_groups"] > 0]
    out["update_per_kept_group"] = (
        statistics.fmean(s["time/update"] / s["filter/kept_groups"] for s in trained)
        if trained else float("nan"))
    out["empty_steps"] = float(len(steps) - len(trained))
    out["filter_share"] = out["time/filter"] / out["time/step"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="iterations per filter")
    parser.add_argument("--env", default=None, help="environment [default: RunConfig's]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="the test suite's tiny model")
    args = parser.parse_args()
    args.env = args.env or build_config({}).env.name

    # veRL is imported on the first update (~6 s); import it here so that neither run pays.
    importlib.import_module("verl.trainer.ppo.core_algos")

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "filter_cost.duckdb"
        for label, options in CASES:
            config = build_config(config_data(args, options))
            run_id = execute(config, db, progress=False)
            results[label] = measure(RunStore(db), run_id)
            print(f"{label}: run {run_id} done", flush=True)
    rollout = config.rollout

    names = list(results)
    print(f"\nfilter cost on {args.env}: P x G = {rollout.prompts} x {rollout.group_size}, "
          f"{args.steps} steps each, seed {args.seed}, "
          f"{'tiny model' if args.tiny else 'default model'} (means over steps 1..{args.steps})\n")
    print(f"{'':<30}" + "".join(f"{n:>14}" for n in names))

    def row(label: str, key: str, fmt: str) -> None:
        print(f"{label:<30}" + "".join(f"{format(results[n][key], fmt):>14}" for n in names))

    row("iteration s (time/step)", "time/step", ".3f")
    for stage in STAGES[:-1]:
        row(f"  {stage.split('/')[1]} s", stage, ".4f" if stage != "time/filter" else ".6f")
    row("filter share of iteration", "filter_share", ".5%")
    row("kept groups", "kept_groups", ".2f")
    row("kept ratio", "kept_ratio", ".3f")
    row("steps with nothing kept", "empty_steps", ".0f")
    row("update s per kept group", "update_per_kept_group", ".4f")
    base, filtered = results[names[0]], results[names[1]]
    if base["time/update"] > 0:
        print(f"\nupdate time top_p / none: {filtered['time/update'] / base['time/update']:.3f} "
              f"at a kept ratio of {filtered['kept_ratio']:.3f}; "
              f"iteration time top_p / none: {filtered['time/step'] / base['time/step']:.3f}")


if __name__ == "__main__":
    main()

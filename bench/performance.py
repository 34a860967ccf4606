"""Where an iteration's time goes, against what this CPU could do.

Measures this machine's matmul rate on the default model's own shapes (the FLOP-bound
limit), then, for each P x G (``--sizes``), runs the default run's iterations (rollout,
score, filter, update; no diagnostics) and prints per stage: its share of the step, the
tokens it processed per second, and that rate as a share of the limit. FLOPs per token
are 2 x parameters for a forward pass (rollout, scoring) and 6 x parameters for the
update's forward and backward (times its epochs). Rollout counts the tokens it generated
("useful") and, beside them, the prompt tokens it prefilled. Threads: the run's policy
(``threads: auto``) unless ``--threads``. Numbers, not pass/fail.

    .venv/bin/python bench/performance.py [--sizes 4x8 8x16 16x16] [--iterations 2]
"""

from __future__ import annotations

import argparse
import statistics

from mirage.core.run import threads
from mirage.core.run.loop import run_step
from mirage.core.run.validate import build_config
from mirage.plugins.backend_local.options import LocalOptions
from common import matmul_rate, prepared_session  # bench/common.py, beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["4x8", "8x16", "16x16"], help="P x G, e.g. 8x16")
    parser.add_argument("--iterations", type=int, default=2, help="timed iterations per size (after one warm-up)")
    parser.add_argument("--threads", type=int, default=None, help="[default: the thread policy]")
    args = parser.parse_args()
    chosen = threads.apply(args.threads or "auto")
    base = build_config({"seed": 0})
    hidden = LocalOptions(**base.model.options).hidden
    peak = max(matmul_rate((4096, hidden, 3 * hidden)), matmul_rate((4096, 3 * hidden, hidden)))
    print(f"{chosen.count} thread(s) ({chosen.reason}); matmul limit on the model's shapes: "
          f"{peak / 1e9:.1f} GFLOP/s")
    print(f"{'P x G':>6} {'step s':>7} {'stage':<8} {'share':>6} {'tokens/s':>9} {'of limit':>9}  notes")
    for size in args.sizes:
        prompts, group = (int(x) for x in size.split("x"))
        session = prepared_session({"seed": 0, "threads": chosen.count, "diagnostics": {"names": []},
                                    "rollout": {"prompts": prompts, "group_size": group}})
        config = session.config
        params = sum(p.numel() for p in session.backend.model.parameters())
        stats: dict[str, list[float]] = {}
        for step in range(1, args.iterations + 2):
            metrics, batch = run_step(session, step)
            if step == 1:
                continue  # warm-up
            turns = [t for traj in batch.trajectories for t in traj.turns]
            generated = sum(len(t.response_ids) for t in turns)
            prompt = sum(len(t.context_ids) for t in turns)
            kept = [t for g in batch.groups if g.kept for traj in g.trajectories for t in traj.turns]
            update_tokens = sum(len(t.context_ids) + len(t.response_ids) for t in kept) * config.algorithm.epochs
            for key, value in {
                "step": metrics["time/step"], "rollout": metrics["time/rollout"], "score": metrics["time/score"],
                "update": metrics["time/update"], "filter": metrics["time/filter"],
                "generated": generated, "prompt": prompt, "scored": generated + prompt, "updated": update_tokens,
            }.items():
                stats.setdefault(key, []).append(value)
        m = {k: statistics.median(v) for k, v in stats.items()}
        limit_forward, limit_update = peak / (2 * params), peak / (6 * params)
        rows = [
            ("rollout", m["generated"] / m["rollout"], (m["generated"] + m["prompt"]) / m["rollout"] / limit_forward,
             f"{m['generated']:.0f} generated, {m['prompt']:.0f} prefilled (share counts both)"),
            ("score", m["scored"] / m["score"], m["scored"] / m["score"] / limit_forward, ""),
            ("update", m["updated"] / m["update"], m["updated"] / m["update"] / limit_update,
             "forward + backward"),
            ("filter", float("nan"), float("nan"), f"{m['filter'] * 1e3:.2f} ms"),
        ]
        for name, rate, share_of_limit, note in rows:
            print(f"{size:>6} {m['step']:>7.2f} {name:<8} {m[name] / m['step']:>6.1%} {rate:>9.0f} "
                  f"{share_of_limit:>9.1%}  {note}")


if __name__ == "__main__":
    main()

"""What seeing costs: an iteration in image mode against the same iteration in text mode.

Builds two sessions of one environment (Sokoban by default), text and image observations,
each with its default policy (the shipped or cached warm start; built first if neither
has it), and times ``--iterations`` plain iterations of each (rollout, score, filter,
update; no diagnostics), interleaved text / image so that both see the machine alike.
Prints the medians, the image / text ratio and each stage's share. Numbers, not pass/fail.

    .venv/bin/python bench/vision.py [--env sokoban] [--iterations 5] [--prompts 8 --group 16]
"""

from __future__ import annotations

import argparse
import copy
import importlib
import statistics

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run import threads
from mirage.core.run.loop import cache_dir, open_session, run_step
from mirage.core.run.validate import build_config, validate_config

STAGES = ("rollout", "score", "filter", "update")


def session_of(data: dict, plugins):
    config = build_config(data)
    session = open_session(config, plugins, validate_config(config, plugins))
    session.backend.prepare(session.env_cls, cache_dir())
    plain = copy.copy(session)
    plain.diagnostics = {}
    return plain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="sokoban", choices=("sokoban", "frozenlake"))
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=16)
    args = parser.parse_args()
    importlib.import_module("verl.trainer.ppo.core_algos")  # paid once, outside the timings
    plugins = build_plugins()
    base = {"seed": 0, "rollout": {"prompts": args.prompts, "group_size": args.group}}
    sessions = {mode: session_of(base | {"env": {"name": args.env, "options": {"observation": mode}}}, plugins)
                for mode in ("text", "image")}
    chosen = threads.apply(sessions["text"].config.threads)
    times: dict[str, list[dict[str, float]]] = {mode: [] for mode in sessions}
    for step in range(1, args.iterations + 1):
        for mode, session in sessions.items():  # interleaved: both see the machine alike
            metrics, _ = run_step(session, step)
            times[mode].append(metrics)
    print(f"\nan iteration of {args.env}, P x G = {args.prompts} x {args.group}, {chosen.count} threads "
          f"({chosen.reason}), medians of {args.iterations} iterations (no diagnostics)\n")
    print(f"{'':<8}{'seconds':>9}" + "".join(f"{stage:>10}" for stage in STAGES) + f"{'tokens/turn':>13}")
    median = {}
    for mode, rows in times.items():
        median[mode] = statistics.median(r["time/step"] for r in rows)
        shares = [statistics.median(r.get(f"time/{stage}", 0.0) for r in rows) / median[mode] for stage in STAGES]
        length = statistics.median(r["train/response_tokens"] for r in rows)
        print(f"{mode:<8}{median[mode]:>9.2f}" + "".join(f"{s:>10.0%}" for s in shares) + f"{length:>13.1f}")
    print(f"\nimage / text: {median['image'] / median['text']:.2f}x")


if __name__ == "__main__":
    main()

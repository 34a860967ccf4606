"""How long to warm-start? Validation success of freshly trained warm starts, side by side.

Trains the default policy's warm start for each seed and each ``--steps`` value (in a
temporary cache, so nothing cached is reused or replaced), then plays the fixed
validation rooms greedy and at temperature 0.5 and prints one row per setting. This is
the measurement behind the default ``model.options.warmstart_steps`` (docs/warm-start.md).

    .venv/bin/python bench/warmstart.py [--env sokoban] [--seeds 0 1] [--steps 600 1200]
                                        [--batch 64] [--lr 2e-3] [--episodes 128]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.batch import make_batch
from mirage.core.run.loop import open_session
from mirage.core.run.validate import validate_config


def success(run, episodes: int, greedy: bool) -> float:
    val = run.config.validation
    torch.manual_seed(val.seed)
    batch = make_batch(0, [val.seed + i for i in range(episodes)], 1,
                       temperature=val.temperature, greedy=greedy)
    run.hook.mirage_rollout(run=run, batch=batch)
    return batch.success_rate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="sokoban")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, nargs="+", default=[600, 1200])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--episodes", type=int, default=128, help="validation episodes")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    plugins = build_plugins()
    cache = Path(tempfile.mkdtemp(prefix="mirage-bench-warmstart-"))
    print(f"{'env':<10} {'seed':>4} {'steps':>5} {'batch':>5} {'lr':>7} {'greedy':>7} {'t=0.5':>6} "
          f"{'final loss':>10} {'minutes':>7}")
    for seed in args.seeds:
        for steps in args.steps:
            config = RunConfig.model_validate({
                "env": {"name": args.env}, "seed": seed, "threads": args.threads,
                "model": {"options": {"warmstart_steps": steps, "warmstart_batch": args.batch,
                                      "warmstart_lr": args.lr}},
            })
            run = open_session(config, plugins, validate_config(config, plugins))
            started = time.perf_counter()
            facts = run.backend.prepare(run.env_cls, cache)
            minutes = (time.perf_counter() - started) / 60
            greedy, sampled = (success(run, args.episodes, g) for g in (True, False))
            print(f"{args.env:<10} {seed:>4} {steps:>5} {args.batch:>5} {args.lr:>7.0e} {greedy:>7.3f} "
                  f"{sampled:>6.3f} {facts['warmstart_final_loss']:>10.3f} {minutes:>7.1f}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

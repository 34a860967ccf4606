"""Room to collapse: the demonstrators' retrieval ceiling beside the warm-started policy's.

For each environment prints, at P prompts per batch: the best first-turn retrieval
accuracy a perfect imitator of the demonstrators could reach (Monte Carlo,
``mirage.core.analysis.ceiling``), the warm-started policy's measured first-turn retrieval
accuracy and H(Z|X) on its own training-temperature rollouts (P x G, mean over
``--batches`` batches), chance (1/P), and validation success greedy and at temperature
0.5. Builds (or reuses) the warm start in the cache, like ``core run``.

    .venv/bin/python bench/mi_ceiling.py [--envs sokoban frozenlake] [--prompts 16]
        [--group-size 8] [--batches 4] [--episodes 256] [--seed 0] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from mirage.core.analysis.ceiling import retrieval_ceiling
from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.loop import cache_dir, open_session
from mirage.core.run.validate import validate_config
from mirage.plugins.backend_local.quality import first_turn_retrieval
from warmstart import success  # bench/warmstart.py, beside this script

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["sokoban", "frozenlake"])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=256, help="validation episodes")
    parser.add_argument("--seed", type=int, default=0, help="run (and warm-start) seed")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    plugins = build_plugins()
    print(f"{'env':<11} {'P':>3} {'ceiling':>7} {'policy':>7} {'chance':>7} {'H(Z|X)':>7} "
          f"{'greedy':>7} {'t=0.5':>6} {'minutes':>7}")
    for env in args.envs:
        config = RunConfig.model_validate(
            {"env": {"name": env}, "seed": args.seed, "threads": args.threads,
             "rollout": {"prompts": args.prompts, "group_size": args.group_size}}
        )
        run = open_session(config, plugins, validate_config(config, plugins))
        ceiling = retrieval_ceiling(run.env_cls, run.env_options,
                                    config.env, prompts=args.prompts, seed=args.seed)
        started = time.perf_counter()
        run.backend.prepare(run.env_cls, cache_dir())
        retrieval, entropy = first_turn_retrieval(run, args.batches)
        greedy, sampled = (success(run, args.episodes, g) for g in (True, False))
        minutes = (time.perf_counter() - started) / 60
        print(f"{env:<11} {args.prompts:>3} {ceiling.retrieval:>7.3f} {retrieval:>7.3f} "
              f"{ceiling.chance:>7.3f} {entropy:>7.3f} {greedy:>7.3f} {sampled:>6.3f} {minutes:>7.1f}",
              flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

"""What the diagnostics cost: cross-scoring with and without prefix reuse, each
diagnostic per check, and their share of an iteration at the configured cadences.

Builds one session (RunConfig's defaults, or the test suite's tiny model with
``--tiny``), rolls out one step-1 batch, then times on it: cross-scoring in both MI
scopes (first turn; trajectory, ``trajectory_samples`` turns) through the backend's
shared prompt cache and the responses' prefix tree, through the old copied cache, and
with every pair scored in full (and the largest difference from full), then the shared
and full ways again in float64 (``cross_score_dtype: float64``); each diagnostic's ``measure`` (``mi``
with all scopes, ``reward``, ``grad``); and ``--iterations`` plain iterations (rollout,
score, filter, update; no diagnostics). The share of an iteration is the amortised cost,
mi / diagnostics.every + grad / diagnostics.options.grad.every + reward, over the iteration
plus it. Medians of ``--repeats`` timings after a warm-up call. Numbers, not pass/fail.

    .venv/bin/python bench/diagnostics.py [--tiny] [--env frozenlake] [--observation image] [--repeats 3] [--prompts 16 --group 16]

``--observation image``: the environment's pictures and the vision-language policy: for
the LLaVA policy "shared" is the lean path (each prompt's picture merged into its prefill
once, the responses through the text model reading the cached keys), "copied" each
context's transformers cache copied per chunk of responses. The three cross-scoring
variants are timed interleaved.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import statistics
import time

import torch

from mirage.core.config import presets
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.batch import make_batch
from mirage.core.run import threads
from mirage.core.run.loop import cache_dir, open_session, run_step, score_batch, step_seeds
from mirage.core.run.validate import build_config, validate_config
from mirage.plugins.backend_local import cross_scoring, response_trie
from mirage.plugins.diagnostics.cross_scoring import assign_columns, first_turns, sampled_turns


def interleaved(fns: dict, repeats: int) -> dict[str, tuple[float, object]]:
    """Name -> (median seconds, a result) of each of ``fns``, called in turn ``repeats``
    times after one untimed warm-up each: interleaved, so a change in the machine's load
    falls on every variant alike and their ratios stay comparable."""
    results = {name: fn() for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            mark = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - mark)
    return {name: (statistics.median(times[name]), results[name]) for name in fns}


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median seconds of ``repeats`` calls after one untimed warm-up call, and a result."""
    fn()
    times, result = [], None
    for _ in range(repeats):
        mark = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - mark)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the test suite's tiny model")
    parser.add_argument("--env", default=None, help="environment [default: RunConfig's]")
    parser.add_argument("--observation", choices=("text", "image"), default="text",
                        help="env.options.observation (Sokoban, FrozenLake)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=3, help="plain iterations timed")
    parser.add_argument("--prompts", type=int, default=None, help="P [default: RunConfig's]")
    parser.add_argument("--group", type=int, default=None, help="G [default: RunConfig's]")
    args = parser.parse_args()
    data: dict = {"seed": 0}
    if args.env:
        data["env"] = {"name": args.env}
    if args.observation == "image":
        data.setdefault("env", {})["options"] = {"observation": "image"}
    rollout = {k: v for k, v in (("prompts", args.prompts), ("group_size", args.group)) if v}
    if rollout:
        data["rollout"] = rollout
    if args.tiny:
        data["model"] = copy.deepcopy(presets.TINY["model"])
    config = build_config(data)
    importlib.import_module("verl.trainer.ppo.core_algos")  # paid once, outside the timings
    plugins = build_plugins()
    session = open_session(config, plugins, validate_config(config, plugins))
    chosen = threads.apply(config.threads)
    session.backend.prepare(session.env_cls, cache_dir())

    session.step = 1
    torch.manual_seed(0)
    batch = make_batch(1, step_seeds(config.seed, 1, config.rollout.prompts), config.rollout.group_size,
                       temperature=config.rollout.temperature)
    session.hook.mirage_rollout(run=session, batch=batch)
    score_batch(session, batch)

    scopes = {"first_turn": first_turns(batch),
              "trajectory": sampled_turns(batch, session.diagnostics["mi"].options.trajectory_samples,
                                          config.seed)}
    scoring = {}
    for scope, turns in scopes.items():
        columns, _ = assign_columns([t.prompt for t in turns])
        reasonings = [z for z in (session.backend.encode(t.reasoning) for t in turns) if z]
        backend = session.backend
        float32, float64 = backend.options, backend.options.model_copy(update={"cross_score_dtype": "float64"})

        def widened(fn):
            def call():
                backend.options = float64
                try:
                    return fn()
                finally:
                    backend.options = float32
            return call

        timings = interleaved({
            "shared": lambda: backend.cross_score(columns, reasonings),
            "copied": lambda: backend.cross_score_copied(columns, reasonings),
            "full": lambda: backend.cross_score(columns, reasonings, reuse_prefix=False),
            "shared64": widened(lambda: backend.cross_score(columns, reasonings)),
            "full64": widened(lambda: backend.cross_score(columns, reasonings, reuse_prefix=False)),
        }, args.repeats)
        (reuse_s, reused), (copy_s, copied), (full_s, full), (reuse64_s, reused64), (full64_s, full64) = \
            timings.values()
        nodes = sum(response_trie.build([reasonings[r] for r in chunk], torch.device("cpu")).size
                    for chunk in response_trie.chunks(reasonings, cross_scoring.NODES))
        scoring[scope] = {
            "shape": f"{len(reasonings)} x {len(columns)}",
            "tokens": (statistics.fmean(len(c) for c in columns), statistics.fmean(len(z) for z in reasonings)),
            "nodes": (nodes, sum(max(len(z) - 1, 0) for z in reasonings)),
            "seconds": (reuse_s, copy_s, full_s),
            "difference": max(float((out.logprobs - full.logprobs).abs().max()) for out in (reused, copied)),
            "float64": (reuse64_s, full64_s, float((reused64.logprobs - full64.logprobs).abs().max()),
                        float((full.logprobs - full64.logprobs).abs().max()),
                        float((reused.logprobs - full64.logprobs).abs().max())),
        }

    costs = {}
    for name, diagnostic in session.diagnostics.items():
        if name == "collapse":
            continue
        costs[name], _ = timed(lambda d=diagnostic: d.measure(session, batch), args.repeats)

    plain = copy.copy(session)
    plain.diagnostics = {}
    iteration = []
    for step in range(1, args.iterations + 1):
        metrics, _ = run_step(plain, step)
        iteration.append(metrics["time/step"])
    iteration_s = statistics.median(iteration)

    settings = config.diagnostics
    cadence = {"mi": settings.every, "reward": 1}
    if "grad" in session.diagnostics:
        cadence["grad"] = session.diagnostics["grad"].options.every
    amortised = sum(costs[n] / cadence[n] for n in costs if n in cadence)
    print(f"\ndiagnostics cost on {config.env.name} ({args.observation}): P x G = {config.rollout.prompts} x "
          f"{config.rollout.group_size}, {'tiny' if args.tiny else 'default'} model, "
          f"{chosen.count} threads ({chosen.reason}), medians of {args.repeats}\n")
    print("cross-scoring, seconds: shared prompt cache (the default), the copied cache (the old path, and the "
          "fallback for other models), every pair in full; speed-ups against full")
    print(f"{'scope':<11}{'Z x prompts':>12}{'tokens':>10}{'tree nodes':>16}{'shared':>9}{'copied':>9}{'full':>9}"
          f"{'shared x':>9}{'copied x':>9}{'max |diff|':>11}")
    for scope, row in scoring.items():
        shared, copied, full = row["seconds"]
        print(f"{scope:<11}{row['shape']:>12}{'%.0f+%.0f' % row['tokens']:>10}{'%d of %d' % row['nodes']:>16}"
              f"{shared:>9.3f}{copied:>9.3f}{full:>9.3f}{full / shared:>9.2f}{full / copied:>9.2f}"
              f"{row['difference']:>11.1e}")
    print("\nthe same in float64 (model.options.cross_score_dtype: float64), and each float32 way's largest "
          "difference from the float64 scores")
    print(f"{'scope':<11}{'shared':>9}{'full':>9}{'shared x':>9}{'max |diff|':>11}{'full32 vs 64':>13}"
          f"{'shared32 vs 64':>15}")
    for scope, row in scoring.items():
        shared, full, difference, full_error, shared_error = row["float64"]
        print(f"{scope:<11}{shared:>9.3f}{full:>9.3f}{full / shared:>9.2f}{difference:>11.1e}{full_error:>13.1e}"
              f"{shared_error:>15.1e}")
    print()
    print(f"{'diagnostic':<14}{'s per check':>12}{'every':>8}{'s per iter':>12}{'share':>9}")
    for name, seconds in costs.items():
        every = cadence.get(name, settings.every)
        share = seconds / every / (iteration_s + amortised)
        print(f"{name:<14}{seconds:>12.4f}{every:>8}{seconds / every:>12.4f}{share:>9.1%}")
    print(f"{'iteration (no diagnostics)':<34}{iteration_s:>12.4f}")
    print(f"diagnostics' share of an iteration at these cadences: "
          f"{amortised / (iteration_s + amortised):.1%}")
    print(f"on a step where every diagnostic runs: "
          f"{sum(costs.values()) / (iteration_s + sum(costs.values())):.1%}")


if __name__ == "__main__":
    main()

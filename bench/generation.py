"""Generation speed: the local backend's lean decode loop against transformers'
``model.generate``, side by side, at one torch thread (or ``--threads``).

Builds the default run's warm-started policy (cached after the first call), rolls out one
P x G batch, and times generation on each turn's contexts of that rollout, the two
decoders interleaved, ``--repeats`` times each, from the same seed. Prints, per turn and
for the whole rollout, useful tokens per second (generated tokens up to and including the
end token, padding excluded) of each decoder, the median ratio, and whether the two
produced the same token ids (they must: tests/plugins/test_decode.py tests it on tiny
models; this checks it on the real policy). Numbers, not pass/fail.

    .venv/bin/python bench/generation.py [--env sokoban] [--prompts 8 --group 16] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from mirage.core.rl.batch import make_batch
from mirage.core.run.loop import step_seeds
from mirage.plugins.backend_local import decode
from common import prepared_session  # bench/common.py, beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=None, help="environment [default: RunConfig's]")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    data: dict = {"seed": 0, "threads": args.threads, "rollout": {"prompts": args.prompts, "group_size": args.group}}
    if args.env:
        data["env"] = {"name": args.env}
    session = prepared_session(data)
    config = session.config
    torch.set_num_threads(args.threads)
    backend = session.backend
    torch.manual_seed(0)
    session.step = 1
    batch = make_batch(1, step_seeds(config.seed, 1, args.prompts), args.group,
                       temperature=config.rollout.temperature)
    session.hook.mirage_rollout(run=session, batch=batch)
    trajectories = [t for g in batch.groups for t in g.trajectories]
    sampling = dict(temperature=config.rollout.temperature, greedy=False,
                    max_new_tokens=config.rollout.max_new_tokens)
    decoders = {
        "generate": lambda ctx: backend.generate_plain(ctx, **sampling),
        "lean": lambda ctx: decode.generate(backend.model, ctx, eos=backend.tokenizer.eos_token_id, **sampling),
    }
    eos = backend.tokenizer.eos_token_id
    print(f"{config.env.name}, P x G = {args.prompts} x {args.group}, {args.threads} thread(s), "
          f"{args.repeats} interleaved repeats; lean loop: {decode.unsupported(backend.model) or 'supported'}")
    print(f"{'turn':>5} {'rows':>5} {'distinct':>8} {'tokens':>7} {'generate tok/s':>15} {'lean tok/s':>11} "
          f"{'ratio':>6} same")
    totals = {name: [0.0] * args.repeats for name in decoders}
    tokens_total = 0
    for turn in range(max(len(t.turns) for t in trajectories)):
        contexts = [t.turns[turn].context_ids for t in trajectories if len(t.turns) > turn]
        seconds, outputs = {name: [] for name in decoders}, {}
        for repeat in range(args.repeats):
            for name, run in decoders.items():
                torch.manual_seed(0)  # every repeat draws the same tokens: rates count exactly
                mark = time.perf_counter()
                out = run(contexts)
                seconds[name].append(time.perf_counter() - mark)
                totals[name][repeat] += seconds[name][-1]
                outputs.setdefault(name, [])
                outputs[name].append([row[: row.index(eos) + 1] if eos in row else row for row in out])
        tokens = sum(len(row) for row in outputs["lean"][0])
        tokens_total += tokens
        rate = {name: tokens / statistics.median(s) for name, s in seconds.items()}
        ratios = [g / lean for g, lean in zip(seconds["generate"], seconds["lean"])]
        same = outputs["generate"] == outputs["lean"]
        print(f"{turn + 1:>5} {len(contexts):>5} {len(set(map(tuple, contexts))):>8} {tokens:>7} "
              f"{rate['generate']:>15.0f} {rate['lean']:>11.0f} {statistics.median(ratios):>5.2f}x {same}")
    rate = {name: tokens_total / statistics.median(s) for name, s in totals.items()}
    ratios = [g / lean for g, lean in zip(totals["generate"], totals["lean"])]
    print(f"{'all':>5} {'':>5} {'':>8} {tokens_total:>7} {rate['generate']:>15.0f} {rate['lean']:>11.0f} "
          f"{statistics.median(ratios):>5.2f}x")


if __name__ == "__main__":
    main()

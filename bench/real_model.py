"""Rollout sampling and an update step on SmolLM2-135M beside the tiny default policy, each
as a share of this machine's measured FLOP limit (issue 44's Speed point).

Two models: the tiny default policy (the shipped or cached warm start) and a
LlamaForCausalLM of SmolLM2-135M-Instruct's shape (bench/llama_decode.py's config; random
weights: the time per token depends on the shape, not the weights). For each, at every
``--threads`` count:

- sampling at batch ``--prompts`` x ``--group`` (16), every row decoding ``--new`` tokens
  (the end token never ends a row, so every path decodes the same count) after random
  ``--context``-token contexts, through ``LocalBackend.generate`` four ways: transformers'
  ``model.generate`` in float32 (what a Llama-architecture model got before the lean loop
  knew Llama), the lean decode loop in float32 (the default), the lean loop under
  ``model.dtype: bfloat16`` autocast, and the lean loop on the bfloat16 sampling copy
  (``model.options.sampling_weights: bfloat16``). The paths take turns within each of
  ``--repeats`` rounds (a change of the machine's load falls on all alike); rates are
  medians, ratios medians of the per-round ratios;
- one 8 x 16 update step: 128 rows of context + response tokens (``--context`` + ``--new``),
  forward and backward in micro-batches of ``--micro-batch`` rows through
  ``LocalBackend.forward``, then one AdamW step (a policy-gradient loss: GRPO's FLOPs).

"of limit" is the rate as a share of an ``[4096, hidden] x [hidden, intermediate]`` matmul
at the same thread count, in float32, and in bfloat16 for the two bfloat16 paths (the
larger of its rates measured before and after the work: the other load moves): sampling
counts 2 x parameters FLOPs per sampled token (prefill and attention left out), the update
6 x parameters per row token. Numbers, not pass/fail.

"floor" (the float32 lean loop's and the bfloat16 copy's) is the rate the path would reach
if its linear products were all it did: the prefill's products for the distinct prompts
and one decode step's products per new token, at the path's own precision and layout,
the weights streaming through memory as in the loop (``linear_floor``). Its "x generate"
is therefore the most any path at that precision can reach on this machine: where it is
under 3, no work on norms, attention or draws brings sampling to 3x generate here.

    .venv/bin/python bench/real_model.py [--threads 1 2] [--repeats 3] [--update-repeats 1]
        [--models tiny smollm2] [--context 192] [--new 64]

Measured 2026-12-06 on the 2-core CPU (Xeon with AMX and avx512_bf16, 23 GB), beside a
study using both cores, torch 2.13, ``OMP_WAIT_POLICY=PASSIVE`` (below).
``OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/real_model.py`` (load average 3.1 at the
start, 2.2 at the end; 3 rounds; tok/s medians, ratios medians of the rounds' ratios):

| model | threads | generate fp32 | lean fp32 | lean autocast | lean bf16 copy | copy / generate | copy / lean | update 8 x 16 |
|---|---|---|---|---|---|---|---|---|
| tiny (0.9M) | 1 | 2095 tok/s (2.2%) | 2912 (3.1%) | 1814 (0.3%) | 2503 (0.5%) | 1.16x | 0.86x | 3.5 s (30%) |
| tiny | 2 | 1744 (2.0%) | 2570 (3.0%) | 1611 (0.3%) | 2590 (0.5%) | 1.20x | 0.94x | 3.8 s (30%) |
| SmolLM2 (134.5M) | 1 | 49.3 (9.6%) | 70.1 (13.7%) | 107.4 (2.2%) | 133.0 (2.8%) | **2.58x** | 1.90x | 310 s (62%) |
| SmolLM2 | 2 | 46.1 (8.9%) | 65.4 (12.7%) | 96.5 (2.2%) | 134.1 (3.0%) | **2.95x** | 2.04x | 239 s (54%) |

(percentages: of the limit, on SmolLM2's shape 138-177 GFLOP/s in float32 and 1193-1447
in bfloat16 over the runs, on the tiny policy's 149-163 and 874-943.) ``--models smollm2 --repeats 5 --update-repeats 0`` right after (load 2.3 at the
start, 3.7 at the end): 53.5 / 86.8 / 130.2 / 166.1 tok/s at 1 thread, the copy **3.26x**
generate and 2.01x the lean loop; 57.5 / 92.2 / 126.3 / 166.6 at 2 threads, **2.83x** and
1.76x. A first full run (load about 4, without the wait policy, so its 2-thread half did
not finish): 1 thread 30.8 / 48.0 / 67.2 / 85.5 tok/s, the copy **3.09x** generate. So the
bfloat16 copy samples SmolLM2 at about 3x transformers' generate in float32 (2.6-3.3x over
the runs, as the load moved) and about 2x the float32 lean loop; the issue's 3x holds in
two of the five measurements (3.09x and 3.26x, one thread) and is missed by up to 14% in
the other three. On the idle machine (load 0.8, nothing else running, 19:36 the same
day), ``--models smollm2 --repeats 3 --update-repeats 0 --threads 1``: 52.0 / 88.5 /
112.0 / 149.1 tok/s, the copy **2.84x** generate (rounds 2.77x, 2.83x, 3.26x) and 1.86x
the lean loop: about 3x, not reliably at or above it.

Why not more: a decode step of 16 rows reads every weight once for 16 tokens, so its
matrix products are bound by memory (the bfloat16 path runs at 3% of the AMX limit; its
products take about half of a step, reading 270 MB at about 5 GB/s); the rest is about
a thousand small operations a step (norms, rotary embedding, the two-part attention).
bfloat16 halves the bytes read; the inverse-CDF draw saves the [16, 49152] exponential
draw (about 20 ms a step, 15% of the bfloat16 step); float32 attention avoids bfloat16's
slow small batched products on this CPU. Autocast (``model.dtype: bfloat16``) gets part
of the gain (its casts are cached within one ``generate`` call) but changes the update's
precision too, and recasts a LoRA base (frozen weights are not cached) at every product.
The tiny policy gains nothing: its steps are bound by per-operation overhead, and
bfloat16 element-wise operations cost more than float32 ones on this CPU.

Threads: with libgomp's default wait policy (spinning), two threads on these two busy
cores were catastrophic: the tiny policy's sampling ran at 42 tok/s against 2438 with
``OMP_WAIT_POLICY=PASSIVE`` (``--models tiny --threads 2 --repeats 1 --new 16 --context
64 --update-repeats 0``), and a SmolLM2 round at 2 threads did not finish in 17 minutes.
Runs choose one thread on a busy machine (``threads: auto``), where the policy does not
matter.

The floor, on the 2-core Xeon without AMX (avx512_bf16 only), 7 December 2026, idle (load
0.9 at the start, 1.4 at the end, only this run), ``OMP_WAIT_POLICY=PASSIVE
.venv/bin/python bench/real_model.py --models smollm2 --repeats 3 --update-repeats 0``:

| threads | generate fp32 | lean fp32 | lean autocast | lean bf16 copy | copy / generate | fp32 floor | bf16 copy floor |
|---|---|---|---|---|---|---|---|
| 1 | 42.1 tok/s | 69.9 | 62.4 | 75.6 | 1.79x | 117.1 (2.78x) | 131.2 (3.11x) |
| 2 | 52.2 | 58.1 | 55.0 | 72.1 | 1.38x | 134.3 (2.57x) | 114.0 (2.19x) |

(this host ran slower than at 00:26 the same day, when generate made 52.0 tok/s at one
thread and the copy 93.6: the ratios, not the rates, carry over.) The copy's linear
products alone take 7.8 s of a round at one thread, against generate's whole round of
22-25 s: 3x would leave 0.3 s for everything else, which takes the other 5.7 s of the
copy's 13.5 s round (norms, rotary embedding, attention, draws). At two threads even the products alone are under 3x. On
this CPU bfloat16 products run at half float32's rate (77-107 against 143-268 GFLOP/s in
this run), so neither precision reaches 3x; on the AMX CPU above, bfloat16 products ran at
1193-1447 GFLOP/s and the copy reached 2.6-3.3x.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from types import SimpleNamespace

import torch

from mirage.core.run.validate import build_config
from mirage.plugins.backend_local.backend import LocalBackend
from common import matmul_rate, prepared_session  # bench/common.py, beside this script
from llama_decode import smollm2_135m_shaped  # bench/llama_decode.py

PATHS = {  # name: the local backend's settings
    "generate fp32": {"options": {"decoder": "generate"}},
    "lean fp32": {},
    "lean autocast": {"dtype": "bfloat16"},
    "lean bf16 copy": {"options": {"sampling_weights": "bfloat16"}},
}
BFLOAT16_PATHS = ("lean autocast", "lean bf16 copy")
FLOOR_PATHS = ("lean fp32", "lean bf16 copy")  # whose linear floor is printed


def models() -> dict[str, torch.nn.Module]:
    tiny = prepared_session({"seed": 0, "threads": 1}).backend.model
    return {"tiny": tiny, "smollm2": smollm2_135m_shaped()}


def backend_for(model: torch.nn.Module, **model_section) -> LocalBackend:
    """The local backend with ``model`` as its policy and ``model_section``'s settings; its
    end token is one the model never samples (every row decodes all its new tokens)."""
    config = build_config({"model": model_section})
    backend = LocalBackend(config, LocalBackend.Options(**config.model.options))
    backend.model = model
    vocab = model.config.vocab_size
    backend.tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=vocab)
    backend.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    return backend


def contexts_for(vocab: int, prompts: int, group: int, length: int) -> list[list[int]]:
    rng = random.Random(0)
    distinct = [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(prompts)]
    contexts = [list(c) for c in distinct for _ in range(group)]
    rng.shuffle(contexts)
    return contexts


def limits(model: torch.nn.Module) -> dict[torch.dtype, float]:
    """The matmul FLOP/s on the model's MLP shape, float32 and bfloat16."""
    shape = (4096, model.config.hidden_size, model.config.intermediate_size)
    return {dtype: matmul_rate(shape, repeats=10, dtype=dtype) for dtype in (torch.float32, torch.bfloat16)}


@torch.no_grad()
def linear_floor(model: torch.nn.Module, args, repeats: int = 3) -> float:
    """Seconds that the lean loop's linear products alone take for one sampling round on
    ``model`` (the policy, or the sampling copy with its packed layers): every linear layer
    but the head at the distinct prompts' ``--prompts`` x ``--context`` rows (the prefill;
    the head at one row a prompt), then ``--new`` decode steps of every layer at ``--prompts``
    x ``--group`` rows, the weights cycling through memory as in the loop. Norms, rotary
    embedding, attention and the draw are left out: no path that multiplies by these
    weights at this precision can sample a round faster on this machine. Median of ``repeats``."""
    head = model.get_output_embeddings()
    body = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head]
    dtype = head.weight.dtype

    def products(rows: int, head_rows: int) -> None:
        inputs = {size: torch.randn(rows, size, dtype=dtype) for size in {m.in_features for m in body}}
        for layer in body:
            layer(inputs[layer.in_features])
        head(torch.randn(head_rows, head.in_features, dtype=dtype))

    def round_() -> float:
        mark = time.perf_counter()
        products(args.prompts * args.context, args.prompts)
        prefill = time.perf_counter() - mark
        mark = time.perf_counter()
        products(args.prompts * args.group, args.prompts * args.group)
        return prefill + args.new * (time.perf_counter() - mark)

    round_()  # warm-up
    return statistics.median(round_() for _ in range(repeats))


def sampling(model, args) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds per round of each path, the paths taking turns (each round's on stderr), and
    the linear floor (:func:`linear_floor`) of the lean fp32 loop and of the bfloat16 copy."""
    backends = {name: backend_for(model, **section) for name, section in PATHS.items()}
    contexts = contexts_for(model.config.vocab_size, args.prompts, args.group, args.context)
    settings = dict(temperature=1.0, greedy=False, max_new_tokens=args.new)
    for backend in backends.values():  # warm-up: the bfloat16 copy is made here
        backend.generate(contexts[:2], **dict(settings, max_new_tokens=2))
    seconds: dict[str, list[float]] = {name: [] for name in backends}
    for _ in range(args.repeats):
        for name, backend in backends.items():
            torch.manual_seed(1)
            mark = time.perf_counter()
            out = backend.generate(contexts, **settings)
            seconds[name].append(time.perf_counter() - mark)
            assert sum(map(len, out)) == len(contexts) * args.new, name
        print("  round: " + ", ".join(f"{name} {s[-1]:.1f} s" for name, s in seconds.items()), file=sys.stderr,
              flush=True)
    floors = {name: linear_floor(backends[name].sampling_model(), args) for name in FLOOR_PATHS}
    return seconds, floors


def update_seconds(model, args) -> list[float]:
    """Seconds of each of ``--update-repeats`` update steps of P x G = 8 x 16 rows."""
    backend = backend_for(model)
    vocab = model.config.vocab_size
    rng = random.Random(1)
    rows = [([rng.randrange(3, vocab) for _ in range(args.context)], [rng.randrange(3, vocab) for _ in range(args.new)])
            for _ in range(8 * 16)]
    advantages = torch.tensor([rng.choice((-1.0, 1.0)) for _ in rows])
    tokens = len(rows) * args.new
    times = []
    for _ in range(args.update_repeats):
        mark = time.perf_counter()
        for start in range(0, len(rows), args.micro_batch):
            micro = rows[start : start + args.micro_batch]
            out = backend.forward([c for c, _ in micro], [r for _, r in micro])
            weights = advantages[start : start + len(micro), None] * out.mask
            (-(out.logprobs * weights).sum() / tokens).backward()
        backend.optimizer_step(1.0)
        times.append(time.perf_counter() - mark)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=["tiny", "smollm2"], default=["tiny", "smollm2"])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--context", type=int, default=192, help="tokens per context")
    parser.add_argument("--new", type=int, default=64, help="new tokens per row")
    parser.add_argument("--repeats", type=int, default=3, help="sampling rounds (the paths take turns)")
    parser.add_argument("--update-repeats", type=int, default=1, help="update steps per model and thread count")
    parser.add_argument("--micro-batch", type=int, default=16, help="rows per forward/backward of the update")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; batch "
          f"{args.prompts * args.group} = {args.prompts} prompts x {args.group}, {args.context}-token contexts, "
          f"{args.new} new tokens a row; {args.repeats} sampling rounds; update: 8 x 16 rows of "
          f"{args.context} + {args.new} tokens, micro-batches of {args.micro_batch}", flush=True)
    built = {name: model for name, model in models().items() if name in args.models}
    print(f"{'model':<8} {'params':>7} {'thr':>3} {'path':<15} {'tok/s':>8} {'of limit':>9} {'x generate':>10} "
          f"{'x lean':>7}  limit GFLOP/s (fp32, bf16)", flush=True)
    for name, model in built.items():
        params = sum(p.numel() for p in model.parameters())
        for count in args.threads:
            torch.set_num_threads(count)
            before = limits(model)
            seconds, floors = sampling(model, args)
            # the load moves: the larger of the limits measured before and after the sampling
            limit = {dtype: max(rate, before[dtype]) for dtype, rate in limits(model).items()}
            tokens = args.prompts * args.group * args.new
            for path, times in seconds.items():
                rate = tokens / statistics.median(times)
                dtype = torch.bfloat16 if path in BFLOAT16_PATHS else torch.float32
                versus = {base: statistics.median(b / t for b, t in zip(seconds[base], times))
                          for base in ("generate fp32", "lean fp32")}
                print(f"{name:<8} {params / 1e6:>6.1f}M {count:>3} {path:<15} {rate:>8.1f} "
                      f"{2 * params * rate / limit[dtype]:>9.2%} {versus['generate fp32']:>9.2f}x "
                      f"{versus['lean fp32']:>6.2f}x  {limit[torch.float32] / 1e9:.0f}, "
                      f"{limit[torch.bfloat16] / 1e9:.0f}", flush=True)
            generate_rate = tokens / statistics.median(seconds["generate fp32"])
            for path, floor in floors.items():
                print(f"{name:<8} {params / 1e6:>6.1f}M {count:>3} {path.removeprefix('lean ') + ' floor':<15} "
                      f"{tokens / floor:>8.1f} "
                      f"{'':>9} {tokens / floor / generate_rate:>9.2f}x  (linear products alone: {floor:.1f} s "
                      f"a round; the most this path can reach here)", flush=True)
            if args.update_repeats:
                step = statistics.median(update_seconds(model, args))
                after = limits(model)[torch.float32]
                limit[torch.float32] = max(limit[torch.float32], after)
                flops = 6 * params * 8 * 16 * (args.context + args.new)
                print(f"{name:<8} {params / 1e6:>6.1f}M {count:>3} {'update 8 x 16':<15} {step:>7.1f}s "
                      f"{flops / step / limit[torch.float32]:>9.2%}", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

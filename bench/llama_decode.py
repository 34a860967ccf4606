"""Rollout throughput on a SmolLM2-135M-shaped Llama: transformers' ``model.generate`` (what
a Llama-architecture model got before the lean loop knew Llama) beside the lean decode loop
(decode.py), sampled tokens per second at batch ``P x G`` (16 by default) at one and two
torch threads, side by side in one run.

The model is LlamaForCausalLM built from SmolLM2-135M-Instruct's config written here
(hidden 576, 30 layers, 9 heads, 3 key/value heads, intermediate 1536, vocab 49152, tied
embeddings, rope theta 100000) with random weights: the time per token depends on the
shape, not the weights. Contexts are random token ids, ``--prompts`` distinct ones of
``--context`` tokens each repeated ``--group`` times (a rollout's first turn; ``--group 1``
for later turns, where no prompt repeats). Both decoders sample from the same seed and must
give the same token ids (printed). float32, as the local backend runs on the CPU; ``--dtype
bfloat16`` runs both under bfloat16 autocast. Numbers, not pass/fail.

    .venv/bin/python bench/llama_decode.py [--prompts 4 --group 4] [--context 192] [--new 64]
        [--threads 1 2] [--repeats 2]

Measured 2026-12-06 on the 2-core CPU under a load average of 6-7 (other work; one repeat,
so about +-30%): defaults at 1 thread, generate 27.4 and 27.9 tok/s against lean 26.6 and
45.7 (0.97x, 1.64x); --new 32: 19.9 against 33.8 (1.70x); 2 threads did not finish within
the time available. Decoding alone (16 distinct 8-token contexts) is 0.8x: a step of either
decoder is the same matrix products (about 70% of its time) and the same [16, 49152]
exponential draw (about 13%); the lean loop gains only the shared prefill of a group's
prompt. The issue's 3x is not reached on this CPU in float32; sampling from a bfloat16
copy of the weights (``model.options.sampling_weights: bfloat16``) reaches about 3x
generate's rate (2.6-3.3x, bench/real_model.py, which measures it through the backend).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mirage.plugins.backend_local import decode

EOS, PAD = 2, 2  # SmolLM2's <|im_end|> is its end token and pad token


def smollm2_135m_shaped() -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, rms_norm_eps=1e-5,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    assert decode.unsupported(model) is None, decode.unsupported(model)
    return model


@torch.no_grad()
def with_generate(model, contexts, max_new_tokens: int) -> list[list[int]]:
    """``model.generate`` on the left-padded batch, as LocalBackend.generate_plain calls it."""
    width = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), width), PAD)
    mask = torch.zeros_like(ids)
    for row, context in enumerate(contexts):
        ids[row, width - len(context):] = torch.tensor(context)
        mask[row, width - len(context):] = 1
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                         top_p=1.0, max_new_tokens=max_new_tokens, pad_token_id=PAD,
                         eos_token_id=EOS)[:, width:].tolist()
    return [row[: row.index(EOS) + 1] if EOS in row else row for row in out]


def with_lean(model, contexts, max_new_tokens: int) -> list[list[int]]:
    return decode.generate(model, contexts, eos=EOS, temperature=1.0, greedy=False, max_new_tokens=max_new_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--context", type=int, default=192, help="tokens per context")
    parser.add_argument("--new", type=int, default=64, help="max new tokens per row")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args()
    model = smollm2_135m_shaped()
    rng = random.Random(0)
    distinct = [[rng.randrange(3, 49152) for _ in range(args.context)] for _ in range(args.prompts)]
    contexts = [list(c) for c in distinct for _ in range(args.group)]
    rng.shuffle(contexts)
    compute = (torch.autocast("cpu", dtype=torch.bfloat16) if args.dtype == "bfloat16"
               else contextlib.nullcontext())
    decoders = {"generate": with_generate, "lean": with_lean}
    print(f"SmolLM2-135M-shaped Llama ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params, random "
          f"weights, {args.dtype}), batch {len(contexts)} = {args.prompts} prompts x {args.group}, "
          f"{args.context}-token contexts, up to {args.new} new tokens, {args.repeats} interleaved repeats")
    print(f"{'threads':>7} {'tokens':>7} {'generate tok/s':>15} {'lean tok/s':>11} {'ratio':>7} same")
    for threads in args.threads:
        torch.set_num_threads(threads)
        seconds, outputs = {name: [] for name in decoders}, {}
        for _ in range(args.repeats):
            for name, run in decoders.items():
                torch.manual_seed(1)  # every repeat draws the same tokens: rates count exactly
                mark = time.perf_counter()
                with compute:
                    outputs[name] = run(model, contexts, args.new)
                seconds[name].append(time.perf_counter() - mark)
        tokens = sum(len(row) for row in outputs["lean"])
        rate = {name: tokens / statistics.median(s) for name, s in seconds.items()}
        ratio = statistics.median(g / lean for g, lean in zip(seconds["generate"], seconds["lean"]))
        print(f"{threads:>7} {tokens:>7} {rate['generate']:>15.1f} {rate['lean']:>11.1f} {ratio:>6.2f}x "
              f"{outputs['generate'] == outputs['lean']}", flush=True)


if __name__ == "__main__":
    main()

"""The cost of the TRL integration's MI pass: a tiny GRPOTrainer with and without it.

Per round, two fresh trainers on the same seed train ``--steps`` steps each, one after
the other (the order alternating from round to round so drift hits both alike): a plain
GRPOTrainer, and a MirageGRPOTrainer diagnosing every step (``every=1``, no filter). The
per-step time is TRL's own ``step_time`` (generation, rewards, the MI pass and the
update); each run's first step is left out as warm-up. Printed: the median step time of
each, their ratio, and the median of the add-on's own ``mirage/time/diagnose``, the one
extra teacher-forced pass over P x P x G (prompt, reasoning) pairs.

    OMP_NUM_THREADS=1 .venv/bin/python -u bench/trl_diagnostics.py [--prompts 4] [--group 4]
        [--steps 6] [--rounds 3] [--completion-tokens 32] [--hidden 64] [--layers 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from datasets import Dataset
from transformers import PrinterCallback
from trl import GRPOConfig, GRPOTrainer

from mirage.integrations.trl import MirageGRPOTrainer, MirageOptions
from mirage.plugins.backend_local.model import build_tiny_model
from mirage.plugins.backend_local.options import LocalOptions
from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

WORDS = "go left right up down one two three four five six seven eight the a is at on".split()


def varied_reward(completions, **kwargs):
    return [float(len(text) % 3) for text in completions]


def step_times(with_mi: bool, args: argparse.Namespace, tokenizer) -> tuple[list[float], list[float]]:
    """One fresh run: its per-step times after the first, and its diagnose times."""
    torch.manual_seed(0)
    model = build_tiny_model(LocalOptions(hidden=args.hidden, layers=args.layers, heads=2), len(tokenizer),
                             tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id)
    prompts = [f"go {WORDS[i % len(WORDS)]} {WORDS[(3 * i) % len(WORDS)]} one two" for i in range(64)]
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(output_dir=out, max_steps=args.steps, num_generations=args.group,
                            per_device_train_batch_size=args.prompts * args.group,
                            max_completion_length=args.completion_tokens, use_cpu=True, report_to=[],
                            logging_steps=1, save_strategy="no", bf16=False, fp16=False, seed=0,
                            disable_tqdm=True)
        common = dict(model=model, reward_funcs=varied_reward, args=config, processing_class=tokenizer,
                      train_dataset=Dataset.from_dict({"prompt": prompts}))
        if with_mi:
            trainer = MirageGRPOTrainer(**common, mirage=MirageOptions(
                every=1, reasoning=lambda text: text or None))
        else:
            trainer = GRPOTrainer(**common)
        trainer.remove_callback(PrinterCallback)  # the numbers are read from log_history
        trainer.train()
    logged = [entry for entry in trainer.state.log_history if "step_time" in entry][1:]
    return ([entry["step_time"] for entry in logged],
            [entry["mirage/time/diagnose"] for entry in logged if "mirage/time/diagnose" in entry])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4, help="P: distinct prompts per step")
    parser.add_argument("--group", type=int, default=4, help="G: completions per prompt")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--completion-tokens", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tokenizer = build_word_tokenizer([" ".join(WORDS)])
    plain, with_mi, diagnose = [], [], []
    started = time.perf_counter()
    for round_index in range(args.rounds):
        for mi in ((False, True) if round_index % 2 == 0 else (True, False)):
            steps, passes = step_times(mi, args, tokenizer)
            (with_mi if mi else plain).extend(steps)
            diagnose.extend(passes)
    base, extra = statistics.median(plain), statistics.median(with_mi)
    pairs = args.prompts * args.prompts * args.group
    print(f"P={args.prompts} G={args.group}: {pairs} (prompt, reasoning) pairs per MI pass; "
          f"completions up to {args.completion_tokens} tokens; model hidden {args.hidden}, "
          f"{args.layers} layers; {args.rounds} rounds x {args.steps} steps "
          f"({time.perf_counter() - started:.0f} s)")
    print(f"median step time: plain GRPOTrainer {base * 1e3:.1f} ms, with the MI pass every step "
          f"{extra * 1e3:.1f} ms, ratio {extra / base:.2f}")
    print(f"median MI pass (mirage/time/diagnose): {statistics.median(diagnose) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()

"""GPU memory check (issue 44, build point 5; docs/gpu.md): one P x G = 8 x 16 iteration
(rollout, score, update) of randomly initialised Qwen2.5-0.5B- and 3B-shaped policies, full
and LoRA (rank 16 on every projection), in bfloat16, through the local backend's own run
step, printing each case's measured peak GPU memory beside the memory plan's estimate.

Nothing is downloaded: the shapes are written below (those of mirage/core/memory/shape.py's
QWEN25), the weights are random, and the tokenizer is the project's word tokenizer trained
on the environment's own text (its instruction and the states of a few rooms; the model's
151,936-entry vocabulary is larger than it needs). Each case writes config.json and the
tokenizer to a temporary directory (``model.path``, which the plan reads as ``core plan``
does) and builds the model from that config on the GPU instead of loading weights.

Each case: ``torch.cuda.reset_peak_memory_stats`` before the backend is built, one step
(``run_step``) at the largest power-of-two micro-batch (at most the default 128) whose
planned peak fits the card, ``torch.cuda.max_memory_allocated`` afterwards. A case that runs
out of memory prints OOM and the next one runs. Prints a table and, with ``--json FILE``,
writes it as JSON. Without a CUDA GPU it prints one line on stderr and exits 2.

    PYTHONPATH=. python scripts/gpu_memory_check.py [--sizes 0.5B 3B] [--json out.json]

About 2-4 minutes on one H100 by the plan's arithmetic (not yet run on one: docs/gpu.md).
``--cpu-tiny`` runs the same code on the CPU with a tiny shape (the test of the script itself).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # mirage from this checkout, however the script is started
    sys.path.insert(0, str(REPO))

# Qwen2.5's published configs, trimmed to what shapes the model (mirage/core/memory/shape.py QWEN25)
SHAPES = {
    "0.5B": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True),
    "3B": dict(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
               intermediate_size=11008, vocab_size=151936, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512, tie_word_embeddings=True),
}
TRAINING = {"full": None, "LoRA r16": {"rank": 16}}
ENV = "sokoban"  # scripts/gpu_smoke.sh's environment


def no_gpu() -> str | None:
    if not torch.cuda.is_available():
        return (f"gpu_memory_check: no CUDA GPU visible to torch {torch.__version__} (CUDA build: "
                f"{torch.version.cuda or 'none'}): run it on a GPU machine (docs/gpu.md)")
    return None


def env_text(env_cls, rooms: int = 32) -> list[str]:
    """What the word tokenizer is trained on: the environment's instruction and the first
    states of ``rooms`` rooms."""
    env = env_cls()
    return [env_cls.instruction, *(env.reset(seed) for seed in range(rooms))]


def write_checkpoint(directory: Path, size: str, tokenizer) -> None:
    """config.json (Qwen2), the tokenizer and a placeholder weights file (the run's checks
    ask for one; :func:`random_weights` never reads it)."""
    from safetensors.torch import save_file
    from transformers import Qwen2Config

    Qwen2Config(**SHAPES[size], max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                bos_token_id=tokenizer.bos_token_id).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    save_file({"placeholder": torch.zeros(1)}, str(directory / "model.safetensors"))


def random_weights(device: str):
    """A stand-in for the backend's ``load_pretrained``: the model of the directory's
    config.json, randomly initialised on ``device``, and the directory's tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from mirage.plugins.backend_local import model as model_lib

    def load(path: str):
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=torch.float32)
        return model, model_lib.load_tokenizer(path)

    return load


def run_config(path: Path, lora: dict | None, micro_batch: int, device: str, dtype: str) -> dict:
    return {"seed": 0, "env": {"name": ENV}, "rollout": {"prompts": 8, "group_size": 16},
            "filter": {"name": "none"},  # random weights give equal rewards: keep them, so the update runs
            "algorithm": {"micro_batch_size": micro_batch},
            "model": {"path": str(path), "device": device, "dtype": dtype, "lora": lora}}


def planned_micro_batch(data: dict, plugins, limit: float) -> tuple[int, object]:
    """The largest power-of-two micro-batch up to 128 whose plan fits ``limit`` bytes (1 if
    none does), and that plan."""
    from mirage.core.memory.run_plan import run_plan
    from mirage.core.run.validate import build_config

    micro = 128
    while True:
        data["algorithm"]["micro_batch_size"] = micro
        plan = run_plan(build_config(data), plugins.registries)
        if plan.peak <= limit or micro == 1:
            return micro, plan
        micro //= 2


def run_case(size: str, training: str, directory: Path, device: str, dtype: str, limit: float) -> dict:
    from mirage.core.memory.plan import GIB
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.run.loop import cache_dir, open_session, run_step
    from mirage.core.run.validate import build_config, validate_config

    plugins = build_plugins()
    data = run_config(directory, TRAINING[training], 128, device, dtype)
    micro, plan = planned_micro_batch(data, plugins, limit)
    result = {"model": f"Qwen2.5-{size}", "training": training, "micro_batch": micro,
              "planned_gib": {"peak": plan.peak / GIB,
                              **{p: plan.phase_total(p) / GIB for p in ("rollout", "score", "update")}}}
    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
    mark = time.perf_counter()
    session = None
    try:
        config = build_config(data)
        session = open_session(config, plugins, validate_config(config, plugins))
        session.backend.prepare(session.env_cls, cache_dir(), progress=False)
        metrics, _ = run_step(session, 1)
        result |= {"seconds": {k.removeprefix("time/"): round(v, 2) for k, v in metrics.items()
                               if k in ("time/rollout", "time/score", "time/update")},
                   "kept_trajectories": metrics.get("filter/kept_trajectories")}
    except torch.cuda.OutOfMemoryError as error:
        result["oom"] = " ".join(str(error).split())[:200]
    result["wall_seconds"] = round(time.perf_counter() - mark, 1)
    if cuda:
        result["measured_gib"] = (torch.cuda.max_memory_allocated() - start) / GIB
    del session
    gc.collect()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=["0.5B", "3B"], default=["0.5B", "3B"])
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--cpu-tiny", action="store_true", help="check the script on the CPU with a tiny shape")
    args = parser.parse_args(argv)
    if not args.cpu_tiny and (problem := no_gpu()):
        print(problem, file=sys.stderr)
        return 2
    from mirage.core.memory.plan import GIB
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.plugins.backend_local import model as model_lib
    from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

    device, dtype = ("cpu", "float32") if args.cpu_tiny else ("cuda", "bfloat16")
    sizes = ["tiny"] if args.cpu_tiny else args.sizes
    limit = torch.cuda.get_device_properties(0).total_memory if device == "cuda" else 64 * GIB
    if device == "cuda":
        print(f"GPU {torch.cuda.get_device_name(0)}, {limit / GIB:.1f} GiB; torch {torch.__version__}", flush=True)
    env_cls = build_plugins().registries.envs.get(ENV)
    tokenizer = build_word_tokenizer(env_text(env_cls))
    model_lib.load_pretrained = random_weights(device)  # the backend loads through this module attribute
    results = []
    print(f"{'model':<14}{'training':<10}{'micro':>6}{'measured GiB':>14}{'planned GiB':>13}{'meas/plan':>11}"
          f"  planned rollout / score / update, GiB; seconds", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            directory = Path(tmp) / size
            write_checkpoint(directory, size, tokenizer)
            for training in TRAINING:
                r = run_case(size, training, directory, device, dtype, limit)
                results.append(r)
                planned = r["planned_gib"]
                measured = r.get("measured_gib")
                shown = "OOM" if "oom" in r else ("-" if measured is None else f"{measured:.2f}")
                ratio = f"{measured / planned['peak']:.2f}" if measured is not None and "oom" not in r else "-"
                print(f"{r['model']:<14}{training:<10}{r['micro_batch']:>6}{shown:>14}{planned['peak']:>13.2f}"
                      f"{ratio:>11}  {planned['rollout']:.1f} / {planned['score']:.1f} / {planned['update']:.1f};"
                      f" {r.get('seconds', r.get('oom'))}, {r['wall_seconds']} s in all", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The memory plan (mirage/core/memory/plan.py) against measured peak memory on the CPU.

Each case runs in a process of its own, forked from one that has only imported torch,
transformers and the local backend (so the imports are paid once for all the cases, and
no case sees the memory another freed): it warms torch up on a throw-away model, resets
the kernel's high-water mark of the process's resident memory (``/proc/self/clear_refs``),
notes the resident size, then builds a randomly initialised Qwen2-layout model of the
case's shape in the local backend and runs two update steps of one micro-batch through
the backend's own code (``forward``, ``reference_logprobs``, ``values``,
``optimizer_step``, ``critic_step``; weights, gradients, AdamW state, reference and
critic as a run holds them). Measured = the high-water mark (``VmHWM``) minus that
resident size: every byte the process touched, torch's allocator and malloc's slack
included. The estimate is the plan's update phase (the rollout's KV cache is not run
here). Linux only. Numbers, not pass/fail (tests/core/test_memory_plan.py bounds them).

    .venv/bin/python bench/memory.py            # every case, a table
    .venv/bin/python bench/memory.py --case A --case B --json   # some cases, one JSON line each
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback
from dataclasses import replace
from pathlib import Path

from mirage.core.memory.plan import GIB, Settings, estimate
from mirage.core.memory.shape import ModelShape

SMALL = ModelShape(hidden=256, layers=4, heads=8, kv_heads=2, intermediate=768, vocab=32000)
WIDE = ModelShape(hidden=512, layers=2, heads=8, kv_heads=8, intermediate=1536, vocab=16000, tied=True)
DEEP = ModelShape(hidden=192, layers=8, heads=6, kv_heads=2, intermediate=1024, vocab=8000, tied=True)
BASE = Settings(micro_batch=16, context_tokens=96, response_tokens=32, rollout_rows=1)

CASES = {
    "small": (SMALL, BASE),
    "small-checkpointed": (SMALL, replace(BASE, gradient_checkpointing=True)),
    "wide-reference": (WIDE, replace(BASE, micro_batch=24, reference=True)),
    "deep-critic": (DEEP, replace(BASE, critic=True)),
    # not used to set the plan's constants: checks of them
    "small-long-response": (SMALL, replace(BASE, context_tokens=32, response_tokens=96)),
    "wide-bfloat16": (WIDE, replace(BASE, dtype="bfloat16")),
}


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _import_libraries() -> None:
    """What :func:`measure` imports (seconds of a case's time), loaded before the forks.
    Imports only: no tensor is made, so no thread pool runs in the process that forks."""
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import mirage.plugins.backend_local.backend  # noqa: F401


def measure(name: str) -> dict:
    """Peak bytes above the starting resident size of two update steps of case ``name``
    (run in this process, which should be fresh or forked by :func:`measure_forked`)."""
    import types

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mirage.core.config.run_config import RunConfig
    from mirage.plugins.backend_local.backend import LocalBackend
    from mirage.plugins.backend_local.options import LocalOptions

    shape, s = CASES[name]
    torch.set_num_threads(1)
    torch.manual_seed(0)

    def config(sh: ModelShape) -> Qwen2Config:
        return Qwen2Config(vocab_size=sh.vocab, hidden_size=sh.hidden, intermediate_size=sh.intermediate,
                           num_hidden_layers=sh.layers, num_attention_heads=sh.heads,
                           num_key_value_heads=sh.kv_heads, tie_word_embeddings=sh.tied,
                           max_position_embeddings=1024)

    def steps(sh: ModelShape, settings: Settings, count: int) -> int:
        run = RunConfig.model_validate({"model": {"device": "cpu", "dtype": settings.dtype}})
        backend = LocalBackend(run, LocalOptions())
        backend.model = Qwen2ForCausalLM(config(sh))
        if settings.gradient_checkpointing:
            backend.model.gradient_checkpointing_enable()
        backend.tokenizer = types.SimpleNamespace(pad_token_id=0)
        backend.optimizer = torch.optim.AdamW(backend.model.parameters(), lr=1e-5, weight_decay=0.0)
        if settings.reference:
            backend.freeze_reference()
        if settings.critic:
            backend.init_critic(1e-5)
        generator = torch.Generator().manual_seed(0)
        contexts = torch.randint(1, sh.vocab, (settings.micro_batch, settings.context_tokens),
                                 generator=generator).tolist()
        responses = torch.randint(1, sh.vocab, (settings.micro_batch, settings.response_tokens),
                                  generator=generator).tolist()
        for _ in range(count):
            out = backend.forward(contexts, responses)
            loss = -(out.logprobs.sum() + 0.001 * out.entropy.sum())
            if settings.reference:
                loss = loss + (out.logprobs - backend.reference_logprobs(contexts, responses)).pow(2).sum()
            if settings.critic:
                loss = loss + backend.values(contexts, responses).pow(2).sum()
            loss.backward()
            backend.optimizer_step(1.0)
            if settings.critic:
                backend.critic_step(1.0)
        return backend.model.num_parameters()

    warm = ModelShape(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64, vocab=64)
    steps(warm, replace(s, micro_batch=2, context_tokens=8, response_tokens=4), 2)
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size
    start = _status("VmRSS")
    parameters = steps(shape, s, 2)
    measured = _status("VmHWM") - start
    plan = estimate(shape, s)
    return {"case": name, "parameters": parameters, "planned_parameters": shape.parameters(),
            "measured": measured, "estimated": plan.phase_total("update"),
            "ratio": plan.phase_total("update") / measured}


def measure_forked(name: str) -> dict:
    """:func:`measure` of ``name`` in a child forked from this process, which should hold
    nothing but its imports (the child's starting resident size is this process's)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            text = json.dumps(measure(name))
        except BaseException:
            text, code = traceback.format_exc(), 1
        with os.fdopen(write, "w") as pipe:
            pipe.write(text)
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"case {name} failed:\n{text}")
    return json.loads(text)


def run_cases(names: list[str]) -> list[dict]:
    """:func:`measure` of each of ``names``, each forked from one fresh process that
    imported the libraries once."""
    command = [sys.executable, __file__, "--json"] + [arg for name in names for arg in ("--case", name)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.strip().splitlines()[-len(names):]]


def run_case(name: str) -> dict:
    """:func:`measure` of ``name`` in a fresh process."""
    return run_cases([name])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), action="append",
                        help="a case to run (repeat for several; default: every case)")
    parser.add_argument("--json", action="store_true", help="print each result as one JSON line")
    args = parser.parse_args()
    _import_libraries()
    if args.json:
        for name in args.case or CASES:
            print(json.dumps(measure_forked(name)), flush=True)
        return
    print(f"{'case':<20}{'params':>10}{'measured MiB':>14}{'estimated MiB':>15}{'est/meas':>10}")
    for name in args.case or CASES:
        r = measure_forked(name)
        print(f"{name:<20}{r['parameters'] / 1e6:>9.2f}M{r['measured'] / 2**20:>14.1f}"
              f"{r['estimated'] / 2**20:>15.1f}{r['ratio']:>10.2f}")
    print(f"(GiB = {GIB} bytes; measured: peak resident memory above the start, a forked process per case)")


if __name__ == "__main__":
    main()

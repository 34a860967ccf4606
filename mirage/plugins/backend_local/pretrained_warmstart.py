"""``core warmstart ENV --model PATH_OR_ID``: a pretrained checkpoint fine-tuned on the
environment's demonstrations until it answers in the format.

The demonstrations are the ones the tiny policy learns from (mirage/core/rl/demos.py), each
context encoded exactly as a run with ``--model`` prompts it (the environment's instruction
and the model's own chat template: the backend's ``encode_prompt``), so what the model
learns to answer is what ``core run --model`` will ask it. Training stops when the format
validity of the validation rooms, checked every ``check_every`` steps, reaches the target,
or at the step limit; the facts say which. With ``model.lora`` only the adapters train, and
the result is written with them merged in: a whole Hugging Face checkpoint, which
``core run --model``, ``core probe`` and vLLM load as they are, and on which an RL run can
put its own fresh adapters (its KL reference, the adapters disabled, is then this warm
start rather than the untuned model).
"""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from mirage.core.plugin_api.session import RunSession
from mirage.core.rl.batch import make_batch
from mirage.core.rl.demos import collect_demonstrations
from mirage.core.run.stages import batch_metrics, rollout

# Learning rates that move a pretrained model's format within tens of steps without
# erasing it: adapters from zero need a larger one than every weight of the model.
LORA_LR = 1e-3
FULL_LR = 5e-5


def measure(run: RunSession) -> dict[str, float]:
    """Format validity (share of turns whose response parses) and success on the run's
    fixed validation rooms, at the validation temperature."""
    val = run.config.validation
    torch.manual_seed(val.seed)
    batch = make_batch(0, [val.seed + i for i in range(val.episodes)], 1, temperature=val.temperature)
    rollout(run, batch, "validation")
    metrics = batch_metrics(batch, "val")
    return {"format_valid": metrics["val/format_valid"], "success": metrics["val/success"]}


def demonstrations(run: RunSession, episodes: int, seed: int) -> tuple[list[tuple[list[int], list[int]]], float]:
    """(prompt ids, response ids + end of sequence) of ``episodes`` demonstrated episodes,
    prompts encoded as the run prompts the model; and the demonstrators' success."""
    backend = run.backend
    demos = collect_demonstrations(run.env_cls, run.env_options, run.config.env, episodes, seed)
    eos = backend.tokenizer.eos_token_id
    return [(backend.encode_prompt(context), backend.encode(response) + [eos])
            for context, response in demos.pairs], demos.success_rate


def finetune(run: RunSession, *, target_format: float, check_every: int, max_steps: int,
             batch_size: int, episodes: int, lr: float | None = None, progress: bool = True) -> dict[str, Any]:
    """Train ``run.backend``'s policy (its adapters with LoRA) on the demonstrations until the
    validation format validity reaches ``target_format`` (checked every ``check_every``
    steps) or ``max_steps``; return the facts: before and after, steps, which stop fired."""
    started = time.perf_counter()
    backend, seed = run.backend, run.config.seed
    lora = backend.adapters is not None
    lr = lr if lr is not None else (LORA_LR if lora else FULL_LR)
    data, demo_success = demonstrations(run, episodes, seed)
    before = measure(run)
    if progress:
        tqdm.write(f"warm start: before, format validity {before['format_valid']:.3f}, success "
                   f"{before['success']:.3f} on {run.config.validation.episodes} validation rooms", file=sys.stderr)
    parameters = [p for p in backend.trained() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0)
    rng = random.Random(seed)
    pad = backend.tokenizer.pad_token_id
    checks: list[dict[str, float]] = []
    after, stopped_by, step, loss_value = before, "step_limit", 0, math.nan
    if before["format_valid"] >= target_format:
        stopped_by = "target"
    bar = tqdm(total=max_steps, desc="warm start", unit="step", disable=not progress, file=sys.stderr)
    while stopped_by != "target" and step < max_steps:
        backend.model.train()
        loss = _step(backend, rng.sample(data, min(batch_size, len(data))), pad)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        backend.weights_changed()  # a separate sampler (bfloat16 copy, vLLM engine) must follow
        loss_value, step = loss.item(), step + 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss_value:.3f}", format=f"{after['format_valid']:.2f}")
        if step % check_every == 0 or step == max_steps:
            backend.model.eval()
            after = measure(run)
            checks.append({"step": step, **after, "loss": loss_value})
            bar.set_postfix(loss=f"{loss_value:.3f}", format=f"{after['format_valid']:.2f}")
            if after["format_valid"] >= target_format:
                stopped_by = "target"
    bar.close()
    backend.model.eval()
    return {
        "warmstart_steps": step,
        "warmstart_stopped_by": stopped_by,
        "warmstart_target_format": target_format,
        "warmstart_check_every": check_every,
        "warmstart_max_steps": max_steps,
        "warmstart_batch": batch_size,
        "warmstart_lr": lr,
        "warmstart_pairs": len(data),
        "warmstart_demo_success": demo_success,
        "warmstart_final_loss": loss_value,
        "format_valid_before": before["format_valid"],
        "format_valid_after": after["format_valid"],
        "validation_success_before": before["success"],
        "validation_success_after": after["success"],
        "validation_episodes": run.config.validation.episodes,
        "validation_temperature": run.config.validation.temperature,
        "checks": checks,
        "warmstart_seconds": round(time.perf_counter() - started, 1),
    }


def _step(backend, batch: list[tuple[list[int], list[int]]], pad: int) -> torch.Tensor:
    """Next-token loss on the response tokens of ``batch`` (right-padded)."""
    width = max(len(c) + len(r) for c, r in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for row, (c, r) in enumerate(batch):
        ids[row, : len(c) + len(r)] = torch.tensor(c + r)
        labels[row, len(c): len(c) + len(r)] = torch.tensor(r)
        mask[row, : len(c) + len(r)] = 1
    device = backend.device
    return backend.model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss


def save(run: RunSession, target: Path, facts: dict[str, Any]) -> None:
    """The policy as a whole checkpoint (adapters merged) with ``facts`` beside it, written
    to a staging folder and renamed into place."""
    import json
    import shutil

    from mirage.plugins.backend_local.shipped import FACTS_FILE

    staging = target.parent / f".{target.name}.new"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    run.backend.export(staging)
    (staging / FACTS_FILE).write_text(json.dumps(facts, indent=1) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)

"""Warm start: supervised training of the tiny policy on demonstrations, cached on disk.

The cache key covers everything that changes the result (environment and its options,
turn protocol, model shape, warm-start settings, the run seed), so a cached policy is
reused only where it would be rebuilt identically.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from mirage.core.config import RunConfig
from mirage.core.demos import collect_demonstrations
from mirage.plugins.backend_local import model as model_lib
from mirage.plugins.backend_local.options import WARM_START_SHAPE, LocalOptions
from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

WARMSTART_VERSION = "1"


def demo_options(config: RunConfig, options: LocalOptions, env_cls) -> dict[str, Any]:
    """The environment options the demonstrations are collected under: the run's, with
    the backend's ``warmstart_env_options`` replacing some, and options left at their default
    dropped (so ``{slip: 0.0}`` and ``{}`` name the same warm start)."""
    merged = {**config.env.options, **options.warmstart_env_options}
    fields = env_cls.Options.model_fields
    resolved = env_cls.Options(**merged).model_dump(mode="json")
    return {name: resolved[name] for name in merged
            if fields[name].is_required() or resolved[name] != fields[name].get_default(call_default_factory=True)}


def cache_key(config: RunConfig, options: LocalOptions, env_cls) -> str:
    env_config = config.env.model_dump(mode="json")
    env_config["options"] = demo_options(config, options, env_cls)
    env_config.pop("chat_template")  # the tiny policy's tokenizer has none: it never applies
    parts = {
        "version": WARMSTART_VERSION,
        "env": [env_cls.name, env_cls.version],
        "env_config": env_config,
        "model": options.model_dump(mode="json", include=set(WARM_START_SHAPE)),
        "seed": warmstart_seed(config, options),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def warmstart_seed(config: RunConfig, options: LocalOptions) -> int:
    """The seed the warm start is built with: the backend's ``warmstart_seed``, else the run seed."""
    seed = options.warmstart_seed
    return config.seed if seed is None else seed


def warm_start(config: RunConfig, options: LocalOptions, env_cls, cache_dir: Path, *,
               progress: bool = True):
    """Return (model, tokenizer, facts), building and caching them if needed; ``progress``
    shows the build's bar on stderr."""
    target = cache_dir / "warmstart" / f"{env_cls.name}-{cache_key(config, options, env_cls)}"
    facts_file = target / "warmstart.json"
    if facts_file.exists():
        model, tokenizer = model_lib.load_pretrained(str(target))
        facts = json.loads(facts_file.read_text())
        return model, tokenizer, {**facts, "warmstart_cached": True}

    cfg = options
    started = time.perf_counter()
    env_options = env_cls.Options(**demo_options(config, options, env_cls))
    seed = warmstart_seed(config, options)
    demos = collect_demonstrations(env_cls, env_options, config.env, cfg.warmstart_episodes, seed)
    tokenizer = build_word_tokenizer(c + "\n" + r for c, r in demos.pairs)
    torch.manual_seed(seed)
    model = model_lib.build_tiny_model(
        cfg, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id
    )
    eos = tokenizer.eos_token_id
    data = [
        (tokenizer.encode(c, add_special_tokens=False), tokenizer.encode(r, add_special_tokens=False) + [eos])
        for c, r in demos.pairs
    ]
    final_loss = _supervised(model, data, cfg, seed, progress)
    facts: dict[str, Any] = {
        "warmstart_pairs": len(data),
        "warmstart_demo_success": demos.success_rate,
        "warmstart_final_loss": final_loss,
        "vocab_size": len(tokenizer),
        "warmstart_seconds": round(time.perf_counter() - started, 1),
    }
    # Concurrent sweep cells may build the same warm start: each writes its own directory
    # and renames it into place, so a reader never sees a half-written one.
    tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / facts_file.name).write_text(json.dumps(facts))
    if target.exists() and not facts_file.exists():  # left by an interrupted older build
        shutil.rmtree(target, ignore_errors=True)
    try:
        tmp.rename(target)
    except OSError:  # another process put the same warm start in place first
        shutil.rmtree(tmp, ignore_errors=True)
    return model, tokenizer, {**facts, "warmstart_cached": False}


def _supervised(model, data: list[tuple[list[int], list[int]]], cfg, seed: int,
                progress: bool) -> float:
    """Next-token loss on response tokens only, AdamW with cosine decay."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.warmstart_lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s / max(cfg.warmstart_steps, 1), 1.0)))
    )
    rng = random.Random(seed)
    model.train()
    loss_value = math.nan
    pad = model.config.pad_token_id
    bar = tqdm(range(cfg.warmstart_steps), desc="warm start", unit="step", leave=False,
               disable=not progress, file=sys.stderr)
    for _ in bar:
        batch = rng.sample(data, min(cfg.warmstart_batch, len(data)))
        width = max(len(c) + len(r) for c, r in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for row, (c, r) in enumerate(batch):
            ids[row, : len(c) + len(r)] = torch.tensor(c + r)
            labels[row, len(c) : len(c) + len(r)] = torch.tensor(r)
            mask[row, : len(c) + len(r)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value = loss.item()
        bar.set_postfix(loss=f"{loss_value:.3f}")
    model.eval()
    return loss_value

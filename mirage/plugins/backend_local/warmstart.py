"""Warm start: supervised training of the tiny policy on demonstrations, cached on disk.

A warm start is looked up by its cache key, first in the cache (``$MIRAGE_CACHE``), then
among the policies shipped with the package (:mod:`.shipped`); only when neither has it
is it trained, and cached. The key covers everything that changes the result (the
environment and its options, the turn protocol, the model shape, the warm-start settings
and seed) and, since the code that makes demonstrations, tokenizers and models changes
too, a fingerprint of what that code produces now: a sample of the demonstrations, the
tokenizer built on them and the model's transformers config. So a cached or shipped
policy is reused only where it would be rebuilt alike.
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

from mirage.core.config.run_config import RunConfig
from mirage.core.rl.demos import collect_demonstrations
from mirage.plugins.backend_local import model as model_lib
from mirage.plugins.backend_local import shipped, vision
from mirage.core.rl.image import IMAGE_MARK
from mirage.plugins.backend_local.options import VISION_SHAPE, WARM_START_SHAPE, LocalOptions
from mirage.plugins.backend_local.shipped import FACTS_FILE
from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

# 2: the key covers a fingerprint of the demonstrations, tokenizer and model config, and
# the seed is the warm-start seed (default 0) rather than the run seed. Raise it when the
# supervised recipe (_supervised) changes, which no fingerprint sees.
WARMSTART_VERSION = "2"
# Demonstrated episodes the fingerprint plays: a prefix of the warm start's own (one
# random stream), enough to meet every reasoning template, cheap enough for every run.
FINGERPRINT_EPISODES = 128
STEPS_TIMED = 5  # supervised steps timed before the build says how long it will take


def demo_options(config: RunConfig, options: LocalOptions, env_cls) -> dict[str, Any]:
    """The environment options the demonstrations are collected under: the run's, with
    the backend's ``warmstart_env_options`` replacing some, and options left at their default
    dropped (so ``{slip: 0.0}`` and ``{}`` name the same warm start)."""
    merged = {**config.env.options, **options.warmstart_env_options}
    fields = env_cls.Options.model_fields
    resolved = env_cls.Options(**merged).model_dump(mode="json")
    return {name: resolved[name] for name in merged
            if fields[name].is_required() or resolved[name] != fields[name].get_default(call_default_factory=True)}


def warmstart_seed(config: RunConfig, options: LocalOptions) -> int:
    """The seed the warm start is built with: the backend's ``warmstart_seed`` (default 0,
    one warm start for every run seed), or the run seed where it is None."""
    seed = options.warmstart_seed
    return config.seed if seed is None else seed


def fingerprint(config: RunConfig, options: LocalOptions, env_cls) -> str:
    """A digest of what today's code builds a warm start from: the first demonstrated
    episodes (with their pictures in image mode), the vocabulary of a tokenizer trained on
    them and the model's config."""
    episodes = min(FINGERPRINT_EPISODES, options.warmstart_episodes)
    env_options = env_cls.Options(**demo_options(config, options, env_cls))
    demos = collect_demonstrations(env_cls, env_options, config.env, episodes,
                                   warmstart_seed(config, options))
    tokenizer, shape = _tokenizer_and_config(demos, options)
    shape = shape.to_diff_dict()
    shape.pop("transformers_version", None)
    parts = {"pairs": demos.pairs, "success": demos.success_rate,
             "vocab": sorted(tokenizer.get_vocab().items()), "model": shape}
    if any(demos.images):  # image mode: the pictures too (a changed sprite is another warm start)
        parts["pictures"] = hashlib.sha256(b"".join(image.png for images in demos.images
                                                    for image in images)).hexdigest()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cache_key(config: RunConfig, options: LocalOptions, env_cls) -> str:
    """The name of the warm start ``config`` asks for (16 hex digits)."""
    env_config = config.env.model_dump(mode="json")
    env_config["options"] = demo_options(config, options, env_cls)
    env_config.pop("chat_template")  # the tiny policy's tokenizer has none: it never applies
    parts = {
        "version": WARMSTART_VERSION,
        "env": [env_cls.name, env_cls.version],
        "env_config": env_config,
        "model": options.model_dump(mode="json", include=set(WARM_START_SHAPE) | (
            set(VISION_SHAPE) if env_config["options"].get("observation") == "image" else set())),
        "seed": warmstart_seed(config, options),
        "fingerprint": fingerprint(config, options, env_cls),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def warm_start(config: RunConfig, options: LocalOptions, env_cls, cache_dir: Path, *,
               progress: bool = True):
    """Return (model, tokenizer, facts): the cached warm start, else the shipped one, else
    one trained now and cached. ``progress`` shows the build's bar and notices on stderr.
    ``facts["warmstart_source"]`` says which (``cache``, ``shipped``, ``built``)."""
    key = cache_key(config, options, env_cls)
    target = cache_dir / "warmstart" / f"{env_cls.name}-{key}"
    name = shipped.policy_of(config)
    for source, directory in (("cache", target), ("shipped", shipped.find(name, key))):
        if directory is not None and (directory / FACTS_FILE).exists():
            return load(directory, source)

    if progress:
        avoid = ("to load the shipped one instead, leave the environment's options, the turn "
                 "protocol and model.options at their defaults"
                 if shipped.record(name) else
                 f"to have it ready before a run or sweep, build it once with `core warmstart "
                 f"{env_cls.name}`; model.options.warmstart_steps trains a shorter, weaker one")
        tqdm.write(f"warm start: {shipped.why_not(name, key)}; training one "
                   f"({options.warmstart_steps} steps), cached in {target} for later runs "
                   f"({avoid})", file=sys.stderr)
    model, tokenizer, facts = build(config, options, env_cls, progress=progress)
    facts["warmstart_key"] = key
    save(target, model, tokenizer, facts)
    return model, tokenizer, {**facts, "warmstart_cached": False, "warmstart_source": "built"}


def load(directory: Path, source: str):
    """(model, tokenizer, facts) of a saved warm start; ``source`` names where it was."""
    model, tokenizer = model_lib.load_pretrained(str(directory))
    facts = json.loads((directory / FACTS_FILE).read_text())
    facts.pop("provenance", None)  # a shipped policy's record: see `core warmstart ENV`
    return model, tokenizer, {**facts, "warmstart_cached": True, "warmstart_source": source}


def build(config: RunConfig, options: LocalOptions, env_cls, *, progress: bool = True):
    """Collect the demonstrations, build the tokenizer and train the policy on them."""
    started = time.perf_counter()
    env_options = env_cls.Options(**demo_options(config, options, env_cls))
    seed = warmstart_seed(config, options)
    demos = collect_demonstrations(env_cls, env_options, config.env, options.warmstart_episodes, seed)
    tokenizer, model_config = _tokenizer_and_config(demos, options)
    torch.manual_seed(seed)
    eos = tokenizer.eos_token_id
    if vision.is_vision_config(model_config):  # image mode: the pictures flow beside the ids
        model = vision.build_tiny_vision_model(model_config)
        processor = vision.processor_for(model, tokenizer)
    else:
        model, processor = model_lib.build_tiny_model_from(model_config), None
    data = [(encode_context(tokenizer, processor, c, images), tokenizer.encode(r, add_special_tokens=False) + [eos],
             images) for (c, r), images in zip(demos.pairs, demos.images)]
    final_loss = _supervised(model, data, options, seed, progress, picture_inputs(processor))
    facts: dict[str, Any] = {
        "warmstart_pairs": len(data),
        "warmstart_demo_success": demos.success_rate,
        "warmstart_final_loss": final_loss,
        "vocab_size": len(tokenizer),
        "warmstart_seconds": round(time.perf_counter() - started, 1),
    }
    return model, tokenizer, facts


def encode_context(tokenizer, processor, context: str, images: tuple) -> list[int]:
    """A demonstration's context as ids: through a vision-language policy's ``processor``
    where it shows pictures, else the tokenizer."""
    if images:
        return vision.encode_with_images(processor, context, images)
    return tokenizer.encode(context, add_special_tokens=False)


def picture_inputs(processor):
    """What :func:`_supervised` calls for a batch's picture inputs: None for text."""
    return None if processor is None else (lambda images, ids: vision.image_inputs(processor, images, "cpu", ids))


def _tokenizer_and_config(demos, options: LocalOptions):
    """The word tokenizer trained on the demonstrations and the tiny policy's transformers
    config: the text model, or (demonstrations with pictures) the vision-language model
    around it, with ``IMAGE_MARK`` as the tokenizer's image token."""
    tokenizer = build_word_tokenizer(c.replace(IMAGE_MARK, " ") + "\n" + r for c, r in demos.pairs)
    image_token = vision.add_image_token(tokenizer) if any(demos.images) else None
    text = model_lib.tiny_model_config(options, len(tokenizer), tokenizer.pad_token_id,
                                       tokenizer.eos_token_id, tokenizer.bos_token_id)
    if image_token is None:
        return tokenizer, text
    width, height = demos.images[0][0].size
    return tokenizer, vision.tiny_vision_config(options, text, image_token, width, height)


def save(target: Path, model, tokenizer, facts: dict[str, Any]) -> None:
    """Write a warm start to ``target`` whole or not at all: concurrent sweep cells may
    build the same one, so each writes its own directory and renames it into place."""
    tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / FACTS_FILE).write_text(json.dumps(facts, indent=1) + "\n")
    if target.exists() and not (target / FACTS_FILE).exists():  # left by an interrupted build
        shutil.rmtree(target, ignore_errors=True)
    try:
        tmp.rename(target)
    except OSError:  # another process put the same warm start in place first
        shutil.rmtree(tmp, ignore_errors=True)


def _supervised(model, data: list[tuple[list[int], list[int], tuple]], cfg, seed: int,
                progress: bool, pixels=None) -> float:
    """Next-token loss on response tokens only, AdamW with cosine decay. ``data``:
    (context ids, response ids, pictures); ``pixels(pictures, ids)`` gives a vision-language
    model's picture inputs (``pixel_values``) for the batch's input ids."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.warmstart_lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s / max(cfg.warmstart_steps, 1), 1.0)))
    )
    rng = random.Random(seed)
    model.train()
    loss_value = math.nan
    pad = model.config.get_text_config().pad_token_id
    bar = tqdm(range(cfg.warmstart_steps), desc="warm start", unit="step", leave=False,
               disable=not progress, file=sys.stderr)
    started = time.perf_counter()
    for step in bar:
        batch = rng.sample(data, min(cfg.warmstart_batch, len(data)))
        width = max(len(c) + len(r) for c, r, _ in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for row, (c, r, _) in enumerate(batch):
            ids[row, : len(c) + len(r)] = torch.tensor(c + r)
            labels[row, len(c) : len(c) + len(r)] = torch.tensor(r)
            mask[row, : len(c) + len(r)] = 1
        seen = {} if pixels is None else pixels([p for _, _, images in batch for p in images], ids)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels, **seen).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value = loss.item()
        bar.set_postfix(loss=f"{loss_value:.3f}")
        if progress and step + 1 == STEPS_TIMED < cfg.warmstart_steps:
            seconds = (time.perf_counter() - started) / STEPS_TIMED * cfg.warmstart_steps
            tqdm.write(f"warm start: about {_duration(seconds)} on this machine "
                       f"({cfg.warmstart_steps} steps)", file=sys.stderr)
    model.eval()
    return loss_value


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} minutes" if seconds >= 90 else f"{seconds:.0f} seconds"

"""A KL reference other than the starting policy: the starting policy fine-tuned on
demonstrations made under other environment options (``model.options.reference_env_options``),
cached on disk like a warm start.

With ``{generic_share: 1.0}`` on a grammar warm start (``generic_style: grammar``) the
reference reasons in valid, input-agnostic, high-entropy boilerplate and acts as the
demonstrators do, so the regulariser's fixed point (alpha H - beta KL is maximised by
pi proportional to pi_ref^(beta / (alpha + beta))) is template collapse itself: issue #32's
lever (b), the regime where the paper's mechanism has something to pull towards. It
shares the policy's tokenizer, so every word of its demonstrations must be in the
policy's vocabulary (a grammar warm start has the grammar's words).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.rl.demos import collect_demonstrations
from mirage.plugins.backend_local import warmstart
from mirage.plugins.backend_local.options import LocalOptions
from mirage.plugins.backend_local.shipped import FACTS_FILE


def reference_options(config: RunConfig, options: LocalOptions, env_cls) -> dict[str, Any]:
    """The environment options of the reference's demonstrations: the warm start's, with
    ``reference_env_options`` replacing some (validated by the environment's Options)."""
    merged = {**warmstart.demo_options(config, options, env_cls), **options.reference_env_options}
    env_cls.Options(**merged)  # refuses an unknown option or a bad value, naming it
    return merged


def reference_key(config: RunConfig, options: LocalOptions, env_cls, source: str) -> str:
    """The cache name of the reference ``config`` asks for, starting from the policy
    ``source`` (its warm-start key or checkpoint path)."""
    parts = {"source": source, "env": [env_cls.name, env_cls.version],
             "options": reference_options(config, options, env_cls),
             "steps": options.reference_steps, "episodes": options.warmstart_episodes,
             "batch": options.warmstart_batch, "lr": options.warmstart_lr,
             "seed": warmstart.warmstart_seed(config, options), "version": warmstart.WARMSTART_VERSION}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def templated_reference(model, tokenizer, config: RunConfig, options: LocalOptions, env_cls,
                        cache_dir: Path, source: str, *, processor=None, progress: bool = True):
    """Return (reference model, facts): the cached reference, else one fine-tuned now from
    a copy of ``model`` and cached (``processor``: a vision-language policy's, which
    encodes the demonstrations' pictures). ConfigError when its demonstrated responses hold words
    the policy's tokenizer does not know."""
    key = reference_key(config, options, env_cls, source)
    target = cache_dir / "reference" / f"{env_cls.name}-{key}"
    if (target / FACTS_FILE).exists():
        reference, _, facts = warmstart.load(target, "cache")
        return reference, {"reference_key": key, "reference_source": "cache",
                           "reference_final_loss": facts.get("reference_final_loss")}
    seed = warmstart.warmstart_seed(config, options)
    env_options = env_cls.Options(**reference_options(config, options, env_cls))
    demos = collect_demonstrations(env_cls, env_options, config.env, options.warmstart_episodes, seed)
    data = _encoded(tokenizer, demos.pairs, demos.images, processor)
    reference = copy.deepcopy(model).cpu()
    recipe = options.model_copy(update={"warmstart_steps": options.reference_steps})
    loss = warmstart._supervised(reference, data, recipe, seed, progress, warmstart.picture_inputs(processor))
    facts = {"reference_key": key, "reference_final_loss": loss, "reference_pairs": len(data),
             "reference_env_options": options.reference_env_options}
    warmstart.save(target, reference, tokenizer, facts)
    return reference, {**facts, "reference_source": "built"}


def _encoded(tokenizer, pairs: list[tuple[str, str]], images: list[tuple], processor=None) -> list[tuple]:
    """(context ids, response ids, pictures) of each pair; a vision-language policy's
    ``processor`` encodes the contexts with their pictures."""
    unknown = tokenizer.unk_token_id
    data, missing = [], set()
    for (context, response), pictures in zip(pairs, images):
        c = warmstart.encode_context(tokenizer, processor, context, pictures)
        r = tokenizer.encode(response, add_special_tokens=False)
        if unknown is not None and unknown in r:  # a prompt's unknown word is read as RL reads it
            vocabulary = tokenizer.get_vocab()
            missing |= {word for word in response.split() if word not in vocabulary}
        data.append((c, r + [tokenizer.eos_token_id], pictures))
    if missing:
        raise ConfigError(
            f"model.options.reference_env_options: the reference's demonstrations use words the "
            f"policy's tokenizer does not know ({', '.join(sorted(missing)[:8])}"
            f"{', ...' if len(missing) > 8 else ''}); warm-start the policy on demonstrations "
            "that contain them (e.g. env.options.generic_style: grammar for a grammar reference)")
    return data

"""A run config's memory plan: its model's shape (``model.path``'s config.json, or the tiny
default policy's options) and the settings of plan.py read from the config."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.memory.plan import GIB, Plan, Settings, alternatives, estimate, lora_of, parse_size
from mirage.core.memory.shape import ModelShape, shape_of_checkpoint, tiny_shape
from mirage.core.plugin_api.registry import Registries
from mirage.core.run.validate import chosen_options

# The planning length of a turn's prompt in tokens (--context-tokens sets another): with the
# instruction (a pretrained --model; a Sokoban prompt with its instruction is about 200
# tokens, docs/gpu.md) or without (the tiny policy's word-level prompts: a state and a few
# words), plus per turn of shown history its response and a state
PROMPT_TOKENS = {True: 216, False: 128}
STATE_TOKENS = 64
PLANNED_BACKENDS = ("local", "vllm")  # the vllm backend trains with the local backend's code


def model_shape(config: RunConfig, backend_options) -> ModelShape:
    """``model.path``'s shape from its config.json, else the tiny policy's from the
    backend's options (``hidden``, ``layers``, ``heads``)."""
    if config.model.path:
        return shape_of_checkpoint(config.model.path)
    try:
        return tiny_shape(backend_options.hidden, backend_options.layers, backend_options.heads)
    except AttributeError:
        raise ConfigError(f"backend {config.model.backend!r} builds its own model and does not say its "
                          "shape: give --model for a plan") from None


def context_tokens(config: RunConfig) -> int:
    """The planning length of a turn's prompt (see PROMPT_TOKENS)."""
    env = config.env
    instruction = env.show_instruction if env.show_instruction is not None else bool(config.model.path)
    shown = env.max_turns - 1 if env.history_turns == -1 else min(env.history_turns, env.max_turns - 1)
    return PROMPT_TOKENS[instruction] + shown * (config.rollout.max_new_tokens + STATE_TOKENS)


def settings_of(config: RunConfig, registries: Registries, *, ranks: int = 1,
                context: int | None = None) -> tuple[Settings, object]:
    """The plan's settings for a resolved ``config`` on ``ranks`` processes (``context``:
    the prompt's tokens, None: :func:`context_tokens`), and the backend's validated options."""
    options = chosen_options(config, registries, "backend", config.model.backend)
    estimator = config.algorithm.adv_estimator
    critic = estimator is not None and registries.estimators.get(estimator).needs_critic
    rows = config.rollout.prompts * config.rollout.group_size
    settings = Settings(
        micro_batch=config.algorithm.micro_batch_size, rollout_rows=math.ceil(rows / ranks),
        context_tokens=context or context_tokens(config), response_tokens=config.rollout.max_new_tokens,
        dtype=config.model.dtype,
        reference=config.algorithm.kl_coef > 0 or bool(getattr(options, "reference_env_options", None)),
        critic=critic, gradient_checkpointing=bool(getattr(options, "gradient_checkpointing", False)),
        lora=lora_of(config.model), ranks=ranks, fsdp=config.model.parallel == "fsdp",
        sampling_copy=getattr(options, "sampling_weights", "policy") == "bfloat16",
        float64_copy=getattr(options, "cross_score_dtype", "float32") == "float64")
    return settings, options


def run_plan(config: RunConfig, registries: Registries, *, ranks: int = 1, context: int | None = None) -> Plan:
    """The memory plan of a resolved ``config``; ConfigError when the backend is not one
    the plan knows or the model's shape cannot be read."""
    if config.model.backend not in PLANNED_BACKENDS:
        raise ConfigError(f"the memory plan knows the {' and '.join(PLANNED_BACKENDS)} backends, "
                          f"not {config.model.backend!r}")
    settings, options = settings_of(config, registries, ranks=ranks, context=context)
    return estimate(model_shape(config, options), settings)


def engine_share(config: RunConfig, registries: Registries) -> float:
    """The share of the device's memory a sampling engine beside the trainer reserves (the
    vllm backend's ``gpu_memory``; 0 for a backend without one)."""
    options = chosen_options(config, registries, "backend", config.model.backend)
    return float(getattr(options, "gpu_memory", 0.0) or 0.0)


@dataclass(frozen=True)
class Limit:
    """A device's memory: ``bytes`` and where the number came from."""

    bytes: float
    source: str

    def less_engine(self, share: float) -> "Limit":
        """What the trainer has where an engine reserves ``share`` of the device."""
        if not share:
            return self
        return Limit(self.bytes * (1 - share), f"{self.source} less the vLLM engine's share {share:g}")


def device_limit(text: str | None, device: str) -> Limit | None:
    """``--device-memory``'s size, else on a GPU (``model.device`` cuda, or auto with one
    visible) its free memory (torch.cuda.mem_get_info), else None (no limit on the CPU).
    ConfigError for a ``text`` that is not a size."""
    if text is not None:
        size = parse_size(text)
        if size is None:
            raise ConfigError(f"--device-memory {text!r} is not a size; expected e.g. 24GB, 22.5GiB or 80G")
        return Limit(size, f"--device-memory {text}")
    if device == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info()
    return Limit(float(free), "the GPU's free memory")


def refusal(plan: Plan, limit: Limit) -> str | None:
    """One line refusing ``plan`` over ``limit``, naming the settings that would fit; None
    when it fits."""
    if plan.peak <= limit.bytes:
        return None
    fits = alternatives(plan.shape, plan.settings, limit.bytes)
    scoring = plan.phase_total("score")
    why = ("" if fits or scoring <= limit.bytes else
           f" (scoring alone needs {scoring / GIB:.1f} GiB: the weights and one chunk's logits)")
    return (f"the memory plan needs {plan.peak / GIB:.1f} GiB per rank, above {limit.source} "
            f"({limit.bytes / GIB:.1f} GiB); "
            + (f"would fit: {'; or '.join(fits)}" if fits else "none of LoRA, gradient checkpointing, a smaller "
               "micro-batch or fsdp brings it under" + why)
            + "; core plan prints the table")

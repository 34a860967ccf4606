"""The local backend's own options (``model.options`` with ``model.backend: local``):
the tiny policy's shape, its warm start, and how it samples."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# The settings that make a warm start: its cache key covers exactly these (warmstart.py).
WARM_START_SHAPE = ("hidden", "layers", "heads", "warmstart_episodes", "warmstart_steps",
                    "warmstart_batch", "warmstart_lr")
# ...and, for an environment in image mode, these too (a text warm start's key is as it was)
VISION_SHAPE = ("vision_hidden", "vision_layers")


class LocalOptions(BaseModel):
    """Used only without ``model.path`` except ``decoder``, ``sampling_weights`` and
    ``cross_score_dtype``: a given checkpoint brings its own shape and skips the warm start."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    hidden: int = Field(128, ge=8, description="the tiny policy's hidden size")
    layers: int = Field(4, ge=1, description="the tiny policy's transformer layers")
    heads: int = Field(4, ge=1, description="the tiny policy's attention heads")
    vision_hidden: int = Field(64, ge=8, description="image mode: the tiny policy's vision tower width "
                               "(a CLIP tower, 16-pixel patches; vision.py)")
    vision_layers: int = Field(2, ge=1, description="image mode: the tiny policy's vision tower layers")
    warmstart_episodes: int = Field(3000, ge=0, description="demonstrated episodes of the warm start")
    warmstart_steps: int = Field(
        1200, ge=0, description="optimizer steps; at 600 the Sokoban policy of some seeds never "
        "learned to read the state (greedy success 0.02 vs 0.57 at 1200, docs/warm-start.md)"
    )
    warmstart_batch: int = Field(64, ge=1, description="demonstration pairs per warm-start step")
    warmstart_lr: float = Field(2e-3, gt=0, description="warm-start learning rate")
    warmstart_seed: int | None = Field(
        0, ge=0, description="seed of the demonstrations and the supervised warm start, apart from "
        "the run seed: every run seed starts from one policy, as RL studies start from one "
        "pretrained model, so seeds differ only in their RL. None: the run seed (one warm start "
        "per run seed, the default of runs stored before December 2026)",
    )
    warmstart_env_options: dict[str, Any] = Field(
        default_factory=dict,
        description="environment options replaced for the demonstrations only, e.g. "
        "{slip: 0.0}: every cell of a FrozenLake stochasticity sweep starts from the policy "
        "warm-started on the deterministic lake, as the paper's cells share one base model",
    )
    reference_env_options: dict[str, Any] = Field(
        default_factory=dict,
        description="environment options of demonstrations the KL reference is fine-tuned on, "
        "starting from the policy: e.g. {generic_share: 1.0} on a grammar warm start makes a "
        "reference that reasons in input-agnostic boilerplate (reference.py; needs "
        "algorithm.kl_coef > 0). Empty: the reference is the starting policy",
    )
    reference_steps: int = Field(300, ge=1, description="supervised steps of that fine-tuning")
    gradient_checkpointing: bool = Field(
        False, description="keep only each decoder layer's input for the backward pass and recompute "
        "the layer there (transformers' gradient_checkpointing_enable): the update's activations "
        "shrink about layers-fold for one more forward per micro-batch (core plan shows the memory)",
    )
    decoder: Literal["lean", "generate"] = Field(
        "lean", description="how the local backend samples: its lean decode loop (the same samples "
        "as transformers' generate for a fixed seed, faster on CPU; Qwen2- and Llama-architecture "
        "models, others fall back) or transformers' model.generate",
    )
    cross_score_dtype: Literal["float32", "float64"] = Field(
        "float32", description="the precision of the MI diagnostics' cross-scoring (every "
        "reasoning under every prompt): the policy's float32, or a float64 copy of it made for "
        "each check (widened.py). A float32 sum of 25-40 log-probs near -100 is off its exact "
        "value by up to about 5e-5; float64 is exact to float64 rounding at about twice the "
        "scoring time. Rollouts and the update are unaffected",
    )
    sampling_weights: Literal["policy", "bfloat16"] = Field(
        "policy", description="the weights rollouts are sampled from: the policy's own (float32, "
        "under model.dtype's autocast), or a bfloat16 copy of them (LoRA merged in), refreshed "
        "before the first sample after every change (sampler.py); the lean loop then draws by "
        "inverse CDF. On SmolLM2-135M on a CPU with bfloat16 matrix units about 3x the sampled "
        "tokens a second of transformers' generate in float32, 1.7x the lean loop's; no gain for "
        "the tiny policy (bench/real_model.py). The update recomputes every log-prob with the "
        "float32 policy, so its importance ratio absorbs the precision gap, as with veRL's "
        "bfloat16 vLLM rollout",
    )

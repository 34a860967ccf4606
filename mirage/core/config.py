"""The one typed run configuration. Every default of a run lives here.

The CLI, ``registry.yaml`` and the flows only build a :class:`RunConfig`; nothing else
invents defaults. Names of components are checked against the plugin registries by
:func:`mirage.core.validate.validate_config` before any work starts.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EnvConfig(_Section):
    """Which environment, its own options, and the turn protocol (PAPER.md section 6)."""

    name: str = "sokoban"
    options: dict[str, Any] = Field(default_factory=dict)
    max_turns: int = Field(5, ge=1)
    max_actions_per_turn: int = Field(2, ge=1)
    format_penalty: float = -0.1
    history_turns: int = Field(
        0, ge=-1, description="previous turns shown in the prompt (-1: all, as RAGEN does)"
    )
    show_instruction: bool | None = Field(
        None,
        description="begin each prompt with the environment's instruction and the answer "
        "format, as RAGEN does; None: only for a pretrained --model (the tiny default policy "
        "learns the format from demonstrations, and constant text only costs compute)",
    )


class RolloutConfig(_Section):
    """P prompts x G samples per iteration; sampling settings for training."""

    prompts: int = Field(8, ge=1, description="P, prompt groups per iteration")
    group_size: int = Field(16, ge=1, description="G, rollouts per prompt")
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: int = Field(40, ge=1)


class FilterConfig(_Section):
    """Which groups the update sees (PAPER.md section 4)."""

    name: str = "top_p"
    rho: float = Field(0.9, description="kept mass (top_p) or kept fraction (top_k), in (0, 1]")
    score: Literal["variance", "std"] = "variance"
    include_zero: bool = False
    max_empty_steps: int = Field(5, ge=1)

    @model_validator(mode="after")
    def _rho_in_range(self) -> "FilterConfig":
        if not 0.0 < self.rho <= 1.0:
            raise ValueError(f"rho must be in (0, 1], got {self.rho}")
        return self


class AlgorithmConfig(_Section):
    """Update hyper-parameters. The paper's lr 1e-6 is for 3B models. For the tiny
    default policy, with its free-form (noisy) reasoning tokens, lr >= 1e-4 lowered
    validation success on FrozenLake within 20 steps and 3e-5 barely moved it; 5e-5
    with 4 mini-batches per iteration is the default (see bench/learning.py)."""

    name: str = "grpo"
    lr: float = Field(5e-5, gt=0)
    entropy_coef: float = Field(0.001, ge=0)
    kl_coef: float = Field(0.0, ge=0)
    kl_penalty: str = "low_var_kl"
    clip_ratio: float = Field(0.2, gt=0)
    max_grad_norm: float = Field(1.0, gt=0)
    mini_batch_size: int = Field(
        32, ge=1, description="trajectories per optimizer step (the reference's ppo_mini_batch_size)"
    )
    epochs: int = Field(1, ge=1, description="passes over the kept trajectories per iteration")
    micro_batch_size: int = Field(128, ge=1, description="turn rows per forward/backward")
    loss_agg_mode: str | None = Field(None, description="None: the algorithm's own default")
    norm_adv_by_std: bool = True


class ModelConfig(_Section):
    """The policy. ``path`` loads any Hugging Face causal LM; otherwise a tiny model is
    built from ``hidden``/``layers``/``heads`` and warm-started on demonstrations."""

    backend: str = "local"
    path: str | None = Field(None, description="checkpoint directory or hub id")
    hidden: int = Field(128, ge=8)
    layers: int = Field(4, ge=1)
    heads: int = Field(4, ge=1)
    warmstart_episodes: int = Field(3000, ge=0)
    warmstart_steps: int = Field(600, ge=0)
    warmstart_batch: int = Field(64, ge=1)
    warmstart_lr: float = Field(2e-3, gt=0)
    dtype: Literal["float32", "bfloat16"] = "float32"


class ValidationConfig(_Section):
    """Fixed seeded validation set, evaluated every ``every`` iterations."""

    every: int = Field(10, ge=1)
    episodes: int = Field(256, ge=1)
    temperature: float = Field(0.5, gt=0)
    greedy: bool = True
    seed: int = 1_000_003


class DiagnosticsConfig(_Section):
    """Which diagnostics run and how often (step 1 and every ``every`` steps)."""

    names: list[str] = Field(default_factory=lambda: ["mi"])
    every: int = Field(5, ge=1)


class RunConfig(_Section):
    """Everything a run needs. ``run_hash`` identifies a resolved configuration."""

    env: EnvConfig = Field(default_factory=EnvConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    diagnostics: DiagnosticsConfig = Field(default_factory=DiagnosticsConfig)
    steps: int = Field(40, ge=1, description="rollout-update iterations")
    seed: int = 0
    checkpoint_every: int = Field(5, ge=1)
    threads: int = Field(2, ge=1, description="torch CPU threads")

    @model_validator(mode="after")
    def _resolve_prompt(self) -> "RunConfig":
        if self.env.show_instruction is None:
            self.env.show_instruction = self.model.path is not None
        return self

    def run_hash(self) -> str:
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

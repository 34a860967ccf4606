"""The one typed run configuration. Every default of a run lives here.

The CLI, ``registry.yaml`` and the flows only build a :class:`RunConfig`; nothing else
invents defaults. Names of components are checked against the plugin registries by
:func:`mirage.core.run.validate.validate_config` before any work starts.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator



# Bounds on inputs, checked before any work (issue 22). Seeds feed numpy's SeedSequence
# and DuckDB BIGINT columns, which take unsigned 32-bit seeds safely.
MAX_SEED = 2**32 - 1
# Trajectories in one batch (P x G for training, episodes for validation): every one is
# held in memory with all its turns until the update, and rollout time grows linearly
# with the count, so far larger values only hang the run.
MAX_BATCH_TRAJECTORIES = 65_536
# Tokens a turn may generate: contexts grow by this each turn and the whole trajectory is
# re-scored in one forward pass per micro-batch.
MAX_NEW_TOKENS = 32_768
# Steps are stored in 32-bit INTEGER columns.
MAX_STEPS = 2**31 - 1
MAX_TEMPERATURE = 100.0  # far past uniform sampling: a larger value is a typo
# A learning rate above 1 (Adam's step is about lr per weight) or a loss coefficient above
# 1000 only turns the policy into NaNs within a step: refused up front instead.
MAX_LR = 1.0
MAX_COEF = 1000.0


class _Section(BaseModel):
    # allow_inf_nan=False: an inf/NaN learning rate or penalty fails mid-run inside
    # sampling ("probability tensor contains inf/nan"); refuse it up front instead.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class EnvConfig(_Section):
    """Which environment, its own options, and the turn protocol (PAPER.md section 6)."""

    name: str = Field("sokoban", description="the environment, a registered name (core plugins; "
                      "docs/environments.md)")
    options: dict[str, Any] = Field(
        default_factory=dict, description="the environment's own options, checked by its "
        "Options (core plugins --options NAME lists them), e.g. frozenlake's slip"
    )
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
    chat_template: bool | None = Field(
        None,
        description="render each prompt as one user message through the tokenizer's chat "
        "template (the trailing <think> opens the assistant's turn), as instruct models expect; "
        "a tokenizer without one (the tiny default policy's) encodes the prompt as it is, and "
        "the run's facts record which happened. None: only for a pretrained --model",
    )


class RolloutConfig(_Section):
    """P prompts x G samples per iteration; sampling settings for training."""

    prompts: int = Field(8, ge=1, description="P, prompt groups per iteration")
    group_size: int = Field(16, ge=1, description="G, rollouts per prompt")
    temperature: float = Field(1.0, gt=0, le=MAX_TEMPERATURE, description="sampling temperature of the training rollouts")
    top_p: float = Field(
        1.0, gt=0, le=1, description="nucleus sampling for training rollouts (1: off); "
        "validation always samples plainly at its own temperature"
    )
    min_p: float = Field(
        0.0, ge=0, lt=1, description="min-p sampling for training rollouts: drop tokens below "
        "min_p times the top token's probability (0: off)"
    )
    max_new_tokens: int = Field(40, ge=1, le=MAX_NEW_TOKENS)
    stored_trajectories: int = Field(
        4, ge=0, description="sampled trajectories per step whose turns (prompt, reasoning, "
        "action, reward) go to the store's rollouts table for the app's rollout browser, "
        "one per prompt in turn (0: none)"
    )


class FilterConfig(_Section):
    """Which groups (or trajectories) the update sees (PAPER.md sections 4 and 6;
    docs/filters.md): the chosen filter, its own options, and the settings the filters
    share. The defaults are the paper's meaning; the reference code's choices are options.
    How the loss is scaled after filtering is the loop's (``RunConfig.loss_scaling``)."""

    name: str = Field("top_p", description="the filter, a registered name (core plugins; docs/filters.md)")
    options: dict[str, Any] = Field(
        default_factory=dict, description="the chosen filter's own options, checked by its "
        "Options (core plugins --options NAME), e.g. {mode: softmax} for top_p, {quartile: 2} "
        "for the quartile filter"
    )
    rho: float = Field(
        0.9, gt=0, le=1, description="what the filter keeps, in (0, 1]: top_p, the share of the score mass; "
        "top_k, entropy, length, the fraction of the prompts; trajectory, the share of each "
        "group's squared-deviation mass"
    )
    score: Literal["variance", "std"] = Field(
        "variance", description="reward variance RV (the paper) or reward std (the reference code)"
    )
    include_zero: bool = Field(
        False, description="ranking filters may keep groups whose G returns are all equal"
    )
    keep: Literal["largest", "smallest"] = Field(
        "largest", description="keep the highest-ranked (largest) or lowest-ranked (smallest) items"
    )

LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"]
GroupStatistics = Literal["exact", "verl"]

class AlgorithmConfig(_Section):
    """Update hyper-parameters (docs/algorithms.md has the table per algorithm).

    Settings that default to None are resolved before a run starts, where the plugins are
    loaded (:func:`mirage.core.run.validate.resolve_algorithm`): first from the chosen
    algorithm class's ``preset``, then from its advantage estimator's ``defaults``, then
    from the generic defaults of :meth:`fill_generic`. A setting the algorithm does not
    use (a critic's for GRPO, dynamic sampling for PPO) stays None, so a stored config
    shows exactly what ran.

    The paper's lr 1e-6 is for 3B models. For the tiny default policy, with its
    free-form (noisy) reasoning tokens, lr >= 1e-4 lowered validation success on
    FrozenLake within 20 steps and 3e-5 barely moved it; 5e-5 with 4 mini-batches per
    iteration is the default (see bench/learning.py)."""

    name: str = Field("grpo", description="the update algorithm, a registered name (core plugins; "
                      "docs/algorithms.md)")
    options: dict[str, Any] = Field(
        default_factory=dict, description="the chosen algorithm's own options, checked by its "
        "Options (core plugins --options NAME)"
    )
    lr: float = Field(5e-5, gt=0, le=MAX_LR, description="actor (policy) learning rate")
    entropy_coef: float = Field(0.001, ge=0, le=MAX_COEF, description="entropy bonus: the loss "
                                "subtracts this times the policy's entropy")
    kl_coef: float = Field(0.0, ge=0, le=MAX_COEF,
                           description="KL penalty to the initial policy; 0: off (the reference)")
    kl_penalty: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"] = "low_var_kl"
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping (actor and critic)")
    mini_batch_size: int = Field(
        32, ge=1, description="trajectories per optimizer step (the reference's ppo_mini_batch_size)"
    )
    mini_batches: int | None = Field(
        None, ge=1, description="optimizer steps per epoch: split the kept trajectories into this "
        "many near-equal mini-batches, so a filtered and an unfiltered arm take the same number "
        "of steps (None: mini_batch_size trajectories per step)",
    )
    epochs: int = Field(1, ge=1, description="passes over the kept trajectories per iteration")
    micro_batch_size: int = Field(128, ge=1, description="turn rows per forward/backward")
    # ---- advantage estimator and loss (resolved per algorithm)
    adv_estimator: str | None = Field(
        None, description="advantage estimator, a registered name (core plugins): the built-in "
        "gae (needs a critic) or grpo (group outcome)"
    )
    norm_adv_by_std: bool | None = Field(
        None, description="grpo estimator: divide by the group's reward std (False: Dr. GRPO)"
    )
    group_statistics: GroupStatistics = Field(
        "exact", description="grpo estimator: exact (float64, equal returns give advantage "
        "exactly 0, the paper's formula) or verl (veRL's float32 estimator, to reproduce the "
        "reference code, docs/diagnostics.md)",
    )
    loss_agg_mode: LossAggMode | None = Field(
        None, description="veRL loss aggregation, with a whole trajectory as the sequence"
    )
    clip_ratio_low: float | None = Field(None, gt=0, lt=1, description="PPO clip: ratio >= 1 - low")
    clip_ratio_high: float | None = Field(None, gt=0, description="PPO clip: ratio <= 1 + high (DAPO clip-higher)")
    clip_ratio_c: float = Field(3.0, gt=1, description="dual-clip bound for negative advantages (veRL)")
    # ---- critic, for the gae estimator
    gamma: float | None = Field(None, ge=0, le=1, description="GAE discount")
    lam: float | None = Field(None, ge=0, le=1, description="GAE lambda")
    critic_lr: float | None = Field(None, gt=0, le=MAX_LR, description="critic (value model) learning rate")
    value_clip: float | None = Field(
        None, gt=0, description="value clipping: new values stay within this of the old ones"
    )
    # ---- DAPO
    dynamic_sampling: bool | None = Field(
        None, description="drop groups whose returns are all equal and refill with extra rollout rounds"
    )
    extra_rollout_rounds: int | None = Field(
        None, ge=0, description="dynamic sampling: most extra rollout rounds per iteration"
    )
    overlong_penalty: float | None = Field(
        None, ge=0, description="soft overlong punishment: reward penalty at max_new_tokens (None: off)"
    )
    overlong_buffer: int | None = Field(
        None, ge=1, description="the penalty grows linearly over the last this many tokens before max_new_tokens"
    )

    @property
    def resolved(self) -> bool:
        """Whether :meth:`fill_generic` ran (it always sets ``clip_ratio_low``)."""
        return self.clip_ratio_low is not None

    def fill_generic(self, max_new_tokens: int) -> None:
        """Fill the unset settings that no preset or estimator chose with generic defaults.

        They are the reference's (PAPER.md section 6) where it has one: clip 0.2, 9 extra
        rollout rounds (DAPO's recipe caps generation at 10 batches), an overlong buffer
        of 20% of the response budget (DAPO: 4,096 of 20,480 tokens).
        """
        low = self.clip_ratio_low = 0.2 if self.clip_ratio_low is None else self.clip_ratio_low
        if self.clip_ratio_high is None:
            self.clip_ratio_high = low
        if self.dynamic_sampling is None:
            self.dynamic_sampling = False
        if self.dynamic_sampling and self.extra_rollout_rounds is None:
            self.extra_rollout_rounds = 9
        if self.overlong_penalty is not None and self.overlong_buffer is None:
            self.overlong_buffer = max(1, round(0.2 * max_new_tokens))


class LoraConfig(_Section):
    """Low-rank adapters on the policy (peft's LoRA; docs/scaling.md): only the adapters
    train and hold optimizer state, the KL reference is the base with the adapters
    disabled, and PPO's critic trains its own adapter and value head on the same frozen base."""

    rank: int = Field(8, ge=1, description="r, the adapters' rank (at most the model's hidden size)")
    alpha: float = Field(16.0, gt=0, description="LoRA alpha: the adapters' update is scaled by alpha / rank")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input while training")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="names of the modules that get adapters (e.g. [q_proj, v_proj]), "
        "or all-linear: every linear layer but the output head")


class ModelConfig(_Section):
    """The policy and the backend that runs it. ``path`` loads any Hugging Face causal LM;
    otherwise the backend builds its own (the local backend: a tiny model warm-started on
    demonstrations, shaped by its options). Settings every backend reads live here; a
    backend's own (the local backend's ``hidden``, ``warmstart_steps``, ...) are its
    ``options`` (``core plugins --options local``)."""

    backend: str = Field(
        "local", description="what runs the policy, a registered name: local (torch), vllm "
        "(rollouts sampled by a vLLM engine, docs/vllm.md) or a plugin's"
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="the chosen backend's own options, checked by its "
        "Options (core plugins --options NAME)"
    )
    path: str | None = Field(
        None, description="a Hugging Face checkpoint directory or hub id; unset, the backend "
        "builds its own (the local backend: a tiny model warm-started on demonstrations)"
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="compute precision of the local backend: bfloat16 runs the "
        "policy, reference and critic under bfloat16 autocast with float32 weights and optimizer "
        "state (pure bfloat16 weights would round away AdamW steps near lr 1e-6); log-probs, "
        "entropies and losses stay float32. The warm start always trains in float32",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where the local backend runs: auto is cuda when a GPU is visible, "
        "else cpu; cuda refuses to start without one. The warm start trains on the CPU",
    )
    parallel: Literal["none", "ddp", "fsdp"] = Field(
        "none", description="ddp: data-parallel over the processes the run is launched on (core "
        "run's nproc and launcher options): each batch's sampling, scoring and update are split "
        "between them and their gradients summed, and every trajectory samples from its own "
        "random stream, so the run is the same for any number of processes (docs/scaling.md); "
        "fsdp: the same, with the update's weights, gradients and optimizer state sharded over "
        "the processes by torch's FSDP2 (local backend; sampling and scoring on a full copy); "
        "none: one process, sampling from one stream per step",
    )
    lora: LoraConfig | None = Field(
        None, description="train low-rank adapters (peft's LoRA) instead of every weight, e.g. "
        "--set model.lora.rank=8; None: every weight trains (docs/scaling.md)",
    )


class ValidationConfig(_Section):
    """Fixed seeded validation set, evaluated every ``every`` iterations."""

    every: int = Field(10, ge=1, le=MAX_STEPS, description="validate every this many steps")
    episodes: int = Field(
        128, ge=1, le=MAX_BATCH_TRAJECTORIES, description="fixed validation episodes (about "
        "+-0.04 of success at 128; the studies in registry.yaml use 256)")
    temperature: float = Field(0.5, gt=0, le=MAX_TEMPERATURE)
    greedy: bool = True
    seed: int = Field(1_000_003, ge=0, le=MAX_SEED)


MIScope = Literal["first_turn", "trajectory"]


class CollapseAlarmConfig(_Section):
    """The collapse alarm's rule (docs/diagnostics.md): it fires on a check where the
    scope's retrieval accuracy has been within ``margin`` of chance for ``checks``
    consecutive checks while the scope's policy entropy stays at or above
    ``entropy_ratio`` times its early level (the mean of the first ``baseline_checks``).
    It stays in the ``diagnostics`` section beside the collapse diagnostic's name: ``stop``
    is one of the loop's stop rules."""

    scope: MIScope = Field(
        "first_turn", description="the MI proxies' scope it reads: one of the mi diagnostic's "
        "scopes (diagnostics.options.mi.scopes)")
    margin: float = Field(0.05, ge=0, description="at chance: retrieval accuracy <= chance + margin")
    checks: int = Field(3, ge=1, description="K: consecutive checks at chance before it fires")
    baseline_checks: int = Field(2, ge=1, description="checks whose mean entropy is the early level")
    entropy_ratio: float = Field(0.9, ge=0, description="entropy counts as high at >= ratio x early level")
    stop: bool = Field(False, description="stop the run (status stopped) when the alarm fires")


class DiagnosticsConfig(_Section):
    """Which diagnostics run, their own options, and how often (docs/diagnostics.md). The
    MI proxies run at step 0, step 1 and every ``every`` steps; reward structure every
    step; the gradient decomposition every ``options.grad.every`` steps. The MI proxies'
    scopes and settings are the ``mi`` diagnostic's options (``core plugins --options mi``)."""

    names: list[str] = Field(default_factory=lambda: ["mi", "reward", "grad", "collapse"])
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-diagnostic settings by name, checked by each "
        "diagnostic's Options (core plugins --options NAME), e.g. {mi: {scopes: [first_turn]}}"
    )
    every: int = Field(5, ge=1, description="diagnostics without a cadence of their own "
                       "(the MI proxies) run at step 0, step 1 and every this many steps")
    alarm: CollapseAlarmConfig = Field(default_factory=CollapseAlarmConfig)


class LoggersConfig(_Section):
    """Experiment trackers that mirror each step's stored metrics (docs/loggers.md). Opt
    in by name; the DuckDB store stays the source of truth, and a logger never changes
    what a run computes, so this section is left out of the run's identity
    (:func:`config_hash`)."""

    names: list[str] = Field(
        default_factory=list, description="loggers that mirror each step's stored metrics: "
        "wandb, mlflow, tensorboard or a plugin's; each needs its extra, pip install "
        "'mirage-rl[NAME]' (docs/loggers.md)"
    )
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-logger settings by name, checked by each logger's "
        "Options, e.g. {wandb: {project: mirage, mode: offline}}"
    )


# Bumped when a change makes runs stored before it incomparable with new runs of the same
# config, so sweeps stop reusing them. 2 (December 2026): the grid worlds' demonstrations
# describe the state (Sokoban 3, FrozenLake 4) and group-outcome advantages are exact
# (algorithm.group_statistics defaults to exact; earlier runs used veRL's float32).
RESULTS_VERSION = 2


class RunConfig(_Section):
    """Everything a run needs. ``run_hash`` identifies a resolved configuration."""

    env: EnvConfig = Field(default_factory=EnvConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    diagnostics: DiagnosticsConfig = Field(default_factory=DiagnosticsConfig)
    loggers: LoggersConfig = Field(default_factory=LoggersConfig)
    steps: int = Field(
        20, ge=1, le=MAX_STEPS, description="rollout-update iterations (the default main job "
        "fits a few minutes on a 2-core CPU; the studies in registry.yaml set their own)")
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="the run's seed (prompts, sampling, updates; the warm "
        "start has its own, model.options.warmstart_seed)")
    checkpoint_every: int = Field(5, ge=1)
    checkpoint_keep: int = Field(
        1, ge=0, description="checkpoints kept, the newest first (0: every one); "
        "`core probe --model RUN@STEP` can probe any kept step")
    # ---- the loop's, after filtering (docs/filters.md)
    loss_scaling: Literal["none", "linear", "sqrt"] = Field(
        "none", description="multiply advantages by the kept share of trajectories (linear) "
        "or its square root (sqrt), as the reference code does"
    )
    step_size_matching: bool = Field(
        False, description="also multiply advantages by filter.rho (the paper's step-size matching)"
    )
    max_empty_steps: int = Field(
        5, ge=1, le=MAX_STEPS, description="stop the run after this many steps in a row with nothing kept")
    threads: int | Literal["auto"] = Field(
        "auto", description="torch CPU threads; auto: chosen from the machine when the run starts "
        "(MIRAGE_THREADS, CPU affinity, cgroup quota, physical cores, idle cores: mirage/core/run/threads.py)",
    )
    results_version: Literal[RESULTS_VERSION] = Field(
        RESULTS_VERSION, description="what this code's results are comparable with (set by the "
        "code, not by users); stored with every run so sweeps never reuse a run of another version",
    )

    @model_validator(mode="after")
    def _batch_fits(self) -> "RunConfig":
        trajectories = self.rollout.prompts * self.rollout.group_size
        if trajectories > MAX_BATCH_TRAJECTORIES:
            raise ValueError(
                f"rollout.prompts x rollout.group_size = {trajectories} trajectories per "
                f"iteration exceeds {MAX_BATCH_TRAJECTORIES}: every one is held in memory "
                "until the update and rollout time grows with the count"
            )
        return self

    @model_validator(mode="after")
    def _resolve_prompt(self) -> "RunConfig":
        if self.env.show_instruction is None:
            self.env.show_instruction = self.model.path is not None
        if self.env.chat_template is None:
            self.env.chat_template = self.model.path is not None
        return self

    def run_hash(self) -> str:
        """The hash of this config; of a resolved one (``build_config`` with plugins, or
        after ``validate_config``), as stored runs and sweep cells are. Raises ValueError
        for an unresolved one, whose unset algorithm settings would hash apart from the
        values a run would use."""
        if not self.algorithm.resolved:
            raise ValueError("run_hash of an unresolved config: build it with "
                             "mirage.core.run.validate.build_config (or validate_config) first")
        return config_hash(self.model_dump(mode="json"))


def config_hash(data: dict[str, Any]) -> str:
    """The identity of a resolved config given as JSON data, equal to
    ``RunConfig.run_hash()`` of the config it was dumped from. The store writes it on a
    run's row when the run is created (stored runs of earlier code got theirs from the
    store's migration 6); sweeps reuse finished cells by the stored hash, never by one
    recomputed from a stored config.

    Only entries that differ from the built-in defaults count, so a setting added later
    with a default that keeps the old behaviour leaves the hash of every config unchanged.
    A change of a default, or of where a setting lives, changes the hashes of the configs
    it touches: it comes with a store migration that rewrites stored configs and their
    hashes (mirage/core/store/migrations.py). The ``results_version`` counts (absent: 1);
    runs of another version never share a hash. The ``loggers`` section is left out: a
    run mirrored to an experiment tracker computes the same results as one that is not.
    A component's option given at its default counts as given (the component, not the
    config, knows the default): registry.yaml leaves such options out."""
    return hash_against(data, _default_dump())


def hash_against(data: dict[str, Any], defaults: dict[str, Any]) -> str:
    """The hash of config ``data``'s settings that differ from ``defaults``, with its
    ``results_version`` (absent: 1), the ``loggers`` section left out."""
    data = dict(data)
    data.pop("loggers", None)  # where results are mirrored, not what they are
    version = data.pop("results_version", 1)
    text = json.dumps({"results_version": version, "config": _non_default(data, defaults)},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def _default_dump() -> dict[str, Any]:
    """The built-in defaults as JSON data, built once per process (only read, never changed)."""
    return RunConfig().model_dump(mode="json")


def _non_default(data: Any, default: Any) -> Any:
    """``data`` without the (nested) entries equal to ``default``'s; a missing entry counts
    as its default, so a section left with no differences is dropped too."""
    if not isinstance(data, dict) or not isinstance(default, dict):
        return data
    kept = {}
    for key, value in data.items():
        if key not in default:
            kept[key] = value
        elif value != default[key]:
            reduced = _non_default(value, default[key])
            if reduced != {} or not isinstance(default[key], dict):
                kept[key] = reduced
    return kept


class AppConfig(_Section):
    """The Streamlit app (``core app``, docs/app.md). Not part of a run: it only reads the store."""

    refresh_seconds: float = Field(
        5.0, gt=0, description="how often the views re-read the store while a selected run is running"
    )
    max_points: int = Field(
        400, ge=10, description="most points per curve; longer runs are averaged over equal step "
        "buckets in SQL"
    )
    default_runs: int = Field(6, ge=1, description="runs selected when the app opens (the newest)")
    lock_timeout: float = Field(
        10.0, gt=0, description="seconds a query retries while a writer holds the store's lock"
    )

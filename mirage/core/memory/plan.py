"""Each rank's peak memory, estimated before a run from the model's shape and the run's
settings (issue 44): what ``core plan`` and ``core run --plan`` print, and what
``--device-memory`` refuses a run by.

The local backend keeps weights and AdamW state in float32 whatever ``model.dtype`` is
(bfloat16 is autocast), so every parameter costs 4 bytes of weights, a trained one 4 of
gradient and 8 of optimizer state (AdamW's two moments). A run goes through three phases,
and the peak is the largest:

- rollout: the weights (policy, reference, critic), the optimizer state, and the
  key/value cache of P x G sequences of context + response tokens (the upper bound: the
  lean decode loop shares a group's prompt);
- score: the same, and one scoring chunk's logits (no gradients);
- update: the same, plus the gradients and the activations one micro-batch keeps for
  its backward pass (the policy's, the critic's, and the B x T x V logits and their
  softmax and gradients), and under bfloat16 autocast's low-precision weight copies.

Activations per token and layer: ``ACT_PER_LAYER`` values of the hidden width, key/value
width and MLP width (counted from Qwen2's decoder layer and checked against measured
peaks, bench/memory.py); with gradient checkpointing only each layer's input is kept, and
one layer is recomputed at a time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from mirage.core.memory.shape import PROJECTIONS, ModelShape
from mirage.core.rl.score_chunks import score_rows

GIB = 1024**3
# Values kept for the backward pass per token of one decoder layer, as multiples of
# (hidden, key/value width, MLP width): the norms' inputs and outputs, q/k/v and their
# rotated copies, the attention output, the MLP's gate, up, activation and product.
ACT_PER_LAYER = (10, 4, 4)
# Values per token and vocabulary entry at the loss's backward: the gradient of the logits
# over context + response (the logits themselves go once gathered; under bfloat16 their
# low-precision copy too), and over the response the gathered logits, log-softmax, its
# exp and their gradients (LocalBackend.per_token, cross_scoring.token_stats); measured
# (bench/memory.py: 1 x T x V + 5 x L x V fit cases of L = T / 4 and L = 3 T / 4).
HEAD_PER_TOKEN = 1  # x T x V
HEAD_PER_RESPONSE_TOKEN = 5  # x L x V
# The reference's forward, run while the policy's graph is kept, cost as much again (measured)
REFERENCE_PER_TOKEN, REFERENCE_PER_RESPONSE_TOKEN = 1, 5
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# Scoring (no gradients) runs in chunks of rows (mirage/core/rl/score_chunks.py, the local
# backend's rule): the chunk's logits over every token (float32; under bfloat16 the
# autocast output beside its float32 copy) and log-softmax statistics over the response positions
SCORE_PER_RESPONSE_TOKEN = 3  # x L x V
PHASES = ("rollout", "score", "update")


@dataclass(frozen=True)
class Lora:
    """LoRA's adapters as the plan sees them: rank and the adapted projections."""

    rank: int
    targets: tuple[str, ...] = PROJECTIONS


@dataclass(frozen=True)
class Settings:
    """What a run's memory depends on besides the model's shape."""

    micro_batch: int = 128  # turn rows per forward/backward
    rollout_rows: int = 128  # P x G sequences sampled at once
    context_tokens: int = 216  # the planning length of a turn's prompt (history included)
    response_tokens: int = 40  # max_new_tokens
    dtype: str = "float32"  # model.dtype: the compute (activation and KV cache) precision
    reference: bool = False  # a KL reference
    critic: bool = False  # PPO's value model
    gradient_checkpointing: bool = False
    lora: Lora | None = None
    ranks: int = 1  # processes the update is sharded over (model.parallel fsdp)
    fsdp: bool = False
    sampling_copy: bool = False  # the local backend's sampling_weights: bfloat16 (a bfloat16 copy)
    float64_copy: bool = False  # the local backend's cross_score_dtype: float64 (a copy per MI check)


@dataclass(frozen=True)
class Component:
    name: str
    bytes: float
    phase: str  # "all" (every phase), "rollout", "score" or "update"
    note: str = ""


@dataclass(frozen=True)
class Plan:
    shape: ModelShape
    settings: Settings
    components: tuple[Component, ...] = field(default=())

    def phase_total(self, phase: str) -> float:
        return sum(c.bytes for c in self.components if c.phase in ("all", phase))

    @property
    def peak(self) -> float:
        """Bytes at the largest phase, on one rank."""
        return max(self.phase_total(phase) for phase in PHASES)

    def render(self, limit: float | None = None) -> str:
        s = self.settings
        lines = [f"memory plan per rank: {self.shape.parameters() / 1e6:,.1f}M parameters "
                 f"(hidden {self.shape.hidden}, {self.shape.layers} layers, vocab {self.shape.vocab}); "
                 f"{s.dtype}; micro-batch {s.micro_batch} x {s.context_tokens}+{s.response_tokens} tokens; "
                 f"rollout {s.rollout_rows} sequences"
                 + (f"; LoRA rank {s.lora.rank}" if s.lora else "")
                 + ("; gradient checkpointing" if s.gradient_checkpointing else "")
                 + (f"; fsdp over {s.ranks}" if s.fsdp and s.ranks > 1 else ""),
                 f"  {'component':<22}{'phase':<9}{'GiB':>9}  note"]
        for c in self.components:
            lines.append(f"  {c.name:<22}{c.phase:<9}{c.bytes / GIB:>9.3f}  {c.note}".rstrip())
        for phase in PHASES:
            lines.append(f"  {phase + ' peak':<31}{self.phase_total(phase) / GIB:>9.3f}")
        lines.append(f"  {'total per rank':<31}{self.peak / GIB:>9.3f}"
                     + (f"  of {limit / GIB:.1f} GiB: {'fits' if self.peak <= limit else 'does NOT fit'}"
                        if limit is not None else ""))
        return "\n".join(lines)


def estimate(shape: ModelShape, settings: Settings) -> Plan:
    """Each component's bytes on one rank (the module docstring says what is counted)."""
    s = settings
    compute = DTYPE_BYTES[s.dtype]
    params = shape.parameters()
    trained = shape.lora_parameters(s.lora.rank, s.lora.targets) if s.lora else params
    shards = s.ranks if s.fsdp else 1
    parts = [Component("weights", 4 * params, "all", "float32 policy")]
    if s.lora:
        parts.append(Component("adapters", 4 * trained, "all", f"{trained / 1e6:,.2f}M trained"))
    if shards > 1:  # sharding.py: the update's sharded copy beside the full replica
        # with LoRA the frozen base and the adapters (the critic's too, frozen there)
        copied = params + trained * (2 if s.critic else 1) if s.lora else params
        parts.append(Component("weight shards", 4 * copied / shards, "all", f"1/{shards} training copy"))
    parts.append(Component("gradients", 4 * trained / shards, "update", "float32"
                           + (f", 1/{shards}" if shards > 1 else "")))
    parts.append(Component("optimizer", 8 * trained / shards, "all", "AdamW: 2 float32 states"
                           + (f", 1/{shards}" if shards > 1 else "")))
    if s.reference:
        parts.append(Component("reference", 0 if s.lora else 4 * params, "all",
                               "the base, adapters disabled" if s.lora else "a full frozen copy"))
    tokens = s.micro_batch * (s.context_tokens + s.response_tokens)
    if s.critic:
        # with LoRA its own adapter on the shared base (lora.py), else a copy of the transformer;
        # either trains with its gradients and AdamW (4 + 4 + 8 bytes per parameter)
        critic_trained = (trained if s.lora else shape.backbone_parameters()) + shape.hidden + 1
        parts.append(Component("critic", 16 * critic_trained, "all",
                               "own adapter + value head on the shared base" if s.lora
                               else "transformer copy + value head, gradients, AdamW"))
    parts.append(Component("activations", activations(shape, s, tokens, lm_head=True), "update",
                           "checkpointed" if s.gradient_checkpointing else "micro-batch"))
    if s.critic:
        parts.append(Component("critic activations", activations(shape, s, tokens, lm_head=False), "update"))
    if compute == 2 and not s.lora:  # autocast keeps a bfloat16 copy of each trained weight per forward
        parts.append(Component("autocast copies", 2 * params * (2 if s.critic else 1), "update",
                               "bfloat16 weight casts"))
    sequence = s.context_tokens + s.response_tokens
    scored = min(score_rows(sequence, shape.vocab), s.rollout_rows)
    logits = scored * (sequence * (1.5 if compute == 2 else 1) + SCORE_PER_RESPONSE_TOKEN * s.response_tokens)
    parts.append(Component("scoring logits", logits * shape.vocab * 4, "score", f"chunks of {scored} rows"))
    if s.sampling_copy:
        parts.append(Component("sampling copy", 2 * params, "all", "bfloat16 weights rollouts sample from"))
    if s.float64_copy:
        parts.append(Component("float64 copy", 8 * params, "score", "MI cross-scoring in float64"))
    kv = s.rollout_rows * sequence * shape.layers * 2 * shape.kv_width * compute
    parts.append(Component("kv cache", kv, "rollout", f"{s.rollout_rows} x {sequence} tokens"))
    parts.append(Component("rollout logits", s.rollout_rows * shape.vocab * 4 * 3, "rollout",
                           "one step's sampling"))
    return Plan(shape, settings, tuple(parts))


def activations(shape: ModelShape, s: Settings, tokens: int, *, lm_head: bool) -> float:
    """Bytes one micro-batch keeps for its backward pass (``tokens``: its rows x width)."""
    a, b, c = ACT_PER_LAYER
    # 4 bytes under either dtype: bfloat16 autocast keeps the float32 inputs of its casts
    # (norms and residual stream stay float32) beside the bfloat16 copies the matmuls read
    layer = tokens * (a * shape.hidden + b * shape.kv_width + c * shape.intermediate) * 4
    if s.gradient_checkpointing:  # each layer's input (float32 residual stream) and one recomputed layer
        body = shape.layers * tokens * shape.hidden * 4 + layer
    else:
        body = shape.layers * layer
    if not lm_head:
        return body
    response = s.micro_batch * s.response_tokens
    per_token = HEAD_PER_TOKEN + (1 if s.dtype == "bfloat16" else 0)
    head = (per_token * tokens + HEAD_PER_RESPONSE_TOKEN * response) * shape.vocab * 4
    if s.reference:
        head += (REFERENCE_PER_TOKEN * tokens + REFERENCE_PER_RESPONSE_TOKEN * response) * shape.vocab * 4
    return body + head


# ------------------------------------------------------------------ what would fit

LORA_TEXT = "model.lora.rank=16 (LoRA on every projection)"


def alternatives(shape: ModelShape, settings: Settings, limit: float) -> list[str]:
    """The changes (alone, else combined) that bring the plan under ``limit`` bytes, as
    the settings to give."""
    s = settings
    options: list[tuple[str, Settings]] = []
    if s.lora is None:
        options.append((LORA_TEXT, replace(s, lora=Lora(16))))
    if not s.gradient_checkpointing:
        options.append(("model.options.gradient_checkpointing=true", replace(s, gradient_checkpointing=True)))
    fits = [text for text, changed in options if estimate(shape, changed).peak <= limit]
    micro = _largest_micro_batch(shape, s, limit)
    if micro is not None and micro < s.micro_batch:
        fits.append(f"algorithm.micro_batch_size={micro}")
    ranks = _fewest_ranks(shape, s, limit)
    if ranks is not None:
        fits.append(f"model.parallel=fsdp with --nproc {ranks}")
    if fits:
        return fits
    together = replace(s, lora=s.lora or Lora(16), gradient_checkpointing=True)
    micro = _largest_micro_batch(shape, together, limit)
    if micro is not None:
        return [(f"{LORA_TEXT} with " if s.lora is None else "")
                + f"model.options.gradient_checkpointing=true and algorithm.micro_batch_size={micro}"]
    return []


def _largest_micro_batch(shape: ModelShape, s: Settings, limit: float) -> int | None:
    best = None
    size = 1
    while size <= s.micro_batch:
        if estimate(shape, replace(s, micro_batch=size)).peak > limit:
            break
        best, size = size, size * 2
    return best


def _fewest_ranks(shape: ModelShape, s: Settings, limit: float, most: int = 64) -> int | None:
    for ranks in (2, 4, 8, 16, 32, most):
        if ranks > (s.ranks if s.fsdp else 1) and estimate(shape, replace(s, fsdp=True, ranks=ranks)).peak <= limit:
            return ranks
    return None


# ------------------------------------------------------------------ sizes

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": GIB, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


def parse_size(text: str) -> float | None:
    """Bytes of a size such as ``24GB`` (decimal), ``22GiB`` (binary) or ``80g``; None when
    ``text`` is not a positive size."""
    match = _SIZE.match(text or "")
    if not match:
        return None
    value = float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    return value if value > 0 and math.isfinite(value) else None


def lora_of(model_config: Any) -> Lora | None:
    """The plan's view of ``model.lora`` where the config has one (None: off). Read by
    attribute so it works with whichever shape that section takes."""
    lora = getattr(model_config, "lora", None)
    if lora is None:
        return None
    get = (lambda key: lora.get(key)) if isinstance(lora, dict) else (lambda key: getattr(lora, key, None))
    if get("enabled") is False:
        return None
    rank = get("rank") or get("r")
    if not rank:
        return None
    targets = get("target_modules") or get("targets") or PROJECTIONS
    if isinstance(targets, str):
        targets = PROJECTIONS if targets in ("all-linear", "all") else (targets,)
    return Lora(int(rank), tuple(t for t in targets if t in PROJECTIONS) or PROJECTIONS)

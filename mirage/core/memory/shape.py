"""A causal LM's shape, read from its ``config.json`` alone (no weights loaded): what the
memory plan (plan.py) counts parameters, activations and caches from."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mirage.core.errors import ConfigError

# LoRA's usual targets: every projection of attention and the MLP (issue 44)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The tiny default policy's word-level vocabulary is built from the environment's
# demonstrations (75-99 words for the shipped policies); the plan counts this many.
TINY_VOCAB = 128


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer (Llama/Qwen2 layout: RMSNorm, GQA attention, SwiGLU MLP)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool = False
    attention_bias: bool = True  # Qwen2 has q/k/v biases
    head_dim: int | None = None  # None: hidden / heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def kv_width(self) -> int:
        """Width of the keys (and of the values) of one token in one layer."""
        return self.kv_heads * self.head_size

    def layer_parameters(self) -> int:
        h, kv, q = self.hidden, self.kv_width, self.heads * self.head_size
        attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.attention_bias else 0)
        return attention + 3 * h * self.intermediate + 2 * h  # two RMSNorm weights

    def backbone_parameters(self) -> int:
        """The transformer without its LM head (what PPO's critic copies)."""
        return self.vocab * self.hidden + self.layers * self.layer_parameters() + self.hidden

    def parameters(self) -> int:
        return self.backbone_parameters() + (0 if self.tied else self.vocab * self.hidden)

    def lora_parameters(self, rank: int, targets: tuple[str, ...] = PROJECTIONS) -> int:
        """Adapter parameters of LoRA at ``rank`` on the ``targets`` of every layer: each
        adapted ``in x out`` projection gains ``rank x (in + out)`` (Hu et al. 2021, section 4)."""
        h, kv, q, inter = self.hidden, self.kv_width, self.heads * self.head_size, self.intermediate
        sides = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h,
                 "gate_proj": h + inter, "up_proj": h + inter, "down_proj": inter + h}
        unknown = [t for t in targets if t not in sides]
        if unknown:
            raise ConfigError(f"LoRA target modules {', '.join(unknown)} are not projections the plan "
                              f"knows; valid: {', '.join(PROJECTIONS)}")
        return self.layers * rank * sum(sides[t] for t in targets)


def shape_of(config: dict[str, Any]) -> ModelShape:
    """The shape of a transformers config (a ``config.json``'s data; a vision-language
    model's text part)."""
    text = config.get("text_config") or config
    try:
        hidden, heads = int(text["hidden_size"]), int(text["num_attention_heads"])
        return ModelShape(
            hidden=hidden, layers=int(text["num_hidden_layers"]), heads=heads,
            kv_heads=int(text.get("num_key_value_heads") or heads),
            intermediate=int(text["intermediate_size"]), vocab=int(text["vocab_size"]),
            tied=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            attention_bias=bool(text.get("attention_bias", text.get("model_type") == "qwen2")),
            head_dim=text.get("head_dim"))
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"the model's config has no usable {error} (the plan reads hidden_size, "
                          "num_hidden_layers, num_attention_heads, intermediate_size, vocab_size)") from None


def shape_of_checkpoint(path: str) -> ModelShape:
    """The shape in ``path``'s ``config.json`` (a local directory, or a hub id transformers'
    AutoConfig finds in its cache); no weights are read."""
    local = Path(path).expanduser()
    if not local.exists() and path.startswith((".", "/", "~")):
        raise ConfigError(f"--model path {path!r} does not exist")
    if local.exists() and not local.is_dir():
        raise ConfigError(f"--model {path!r} is a file: the plan reads a checkpoint directory's config.json")
    if local.is_dir():
        file = local / "config.json"
        if not file.is_file():
            raise ConfigError(f"--model {path!r} has no config.json: the plan reads the model's shape from it")
        return shape_of(json.loads(file.read_text()))
    from transformers import AutoConfig

    try:
        return shape_of(AutoConfig.from_pretrained(path).to_dict())
    except OSError as error:
        raise ConfigError(f"--model {path!r}: cannot read its config ({' '.join(str(error).split())[:200]})") from None


def tiny_shape(hidden: int, layers: int, heads: int) -> ModelShape:
    """The local backend's tiny default policy (its ``tiny_model_config``: Qwen2 layout,
    intermediate 3 x hidden, as many key/value heads as heads, tied embeddings; a test
    keeps the two equal) with the planning vocabulary."""
    return ModelShape(hidden=hidden, layers=layers, heads=heads, kv_heads=heads, intermediate=3 * hidden,
                      vocab=TINY_VOCAB, tied=True)


# Published Qwen2.5 configs (Hugging Face Qwen/Qwen2.5-*/config.json), for docs/gpu.md
QWEN25 = {
    "0.5B": ModelShape(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab=151936, tied=True),
    "3B": ModelShape(hidden=2048, layers=36, heads=16, kv_heads=2, intermediate=11008, vocab=151936, tied=True),
    "7B": ModelShape(hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944, vocab=152064, tied=False),
}


def with_vocab(shape: ModelShape, vocab: int) -> ModelShape:
    return replace(shape, vocab=vocab)

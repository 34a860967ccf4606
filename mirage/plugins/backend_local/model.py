"""Building the tiny default policy from a transformers config, or loading any causal LM."""

from __future__ import annotations

import contextlib
import functools

import re
import threading
from pathlib import Path

import torch
import json

from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

from mirage.core.config.paths import checkpoint_problem, gguf_file
from mirage.core.errors import ConfigError
from mirage.plugins.backend_local.options import LocalOptions

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# transformers builds a pretrained model under process-wide switches (meta-device init,
# skipped weight init) that other threads see too: two cells of a thread-runner sweep
# loading at once got models with meta parameters (38 of 40 loads in a two-thread test).
# Every model this module builds or loads is made under one lock.
_BUILDING = threading.Lock()


def model_source_error(path: str) -> str | None:
    """Why ``path`` can be neither a local checkpoint directory nor a hub id, or None."""
    local = Path(path).expanduser()
    if local.exists():
        return checkpoint_problem(local, path) or gguf_problem(local, path)
    if path.startswith((".", "/", "~")) or not _HUB_ID.match(path):
        return f"--model path {path!r} does not exist"
    return None


# What transformers needs to read a GGUF file (`pip install 'mirage-rl[gguf]'`): gguf parses
# it, accelerate places the dequantised weights.
GGUF_PACKAGES = ("gguf", "accelerate")


def gguf_problem(local: Path, path: str) -> str | None:
    """Why the GGUF file ``local`` names cannot be loaded here (a package it needs is
    missing), or None; None too for a path that is not a GGUF file."""
    import importlib.util

    if gguf_file(local) is None:
        return None
    missing = [name for name in GGUF_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        return (f"--model {path!r} is a GGUF file, which transformers reads only with the "
                f"package(s) {', '.join(missing)} installed: pip install 'mirage-rl[gguf]'")
    return None


def tiny_model_config(config: LocalOptions, vocab_size: int, pad_id: int, eos_id: int,
                      bos_id: int) -> Qwen2Config:
    """The transformers config of the tiny policy: Qwen2 architecture, tied embeddings."""
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=config.hidden,
        intermediate_size=config.hidden * 3,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=bos_id,
    )


def build_tiny_model(config: LocalOptions, vocab_size: int, pad_id: int, eos_id: int, bos_id: int):
    """A small Qwen2-architecture causal LM with tied embeddings, freshly initialised."""
    return build_tiny_model_from(tiny_model_config(config, vocab_size, pad_id, eos_id, bos_id))


def build_tiny_model_from(qwen: Qwen2Config):
    """The causal LM of ``qwen`` (:func:`tiny_model_config`), freshly initialised."""
    with _BUILDING:
        return Qwen2ForCausalLM(qwen)


def _saved_as_plain_tokenizers(path: str) -> bool:
    config = Path(path).expanduser() / "tokenizer_config.json"
    if not config.is_file():
        return False
    saved = json.loads(config.read_text()).get("tokenizer_class")
    return saved in ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_pretrained(path: str):
    """Model and tokenizer from a checkpoint directory or hub id; ConfigError (one line)
    when neither the hub nor its cache has it."""
    gguf = gguf_file(Path(path).expanduser())
    if gguf is not None:  # dequantised to float32 by transformers, its metadata parsed once
        if problem := gguf_problem(gguf, path):
            raise ConfigError(problem)
        source, named = {"gguf_file": gguf.name}, str(gguf.parent)
    else:
        source, named = {}, path
    try:
        with _gguf_parsed_once() if gguf is not None else contextlib.nullcontext():
            tokenizer = load_tokenizer(named, **source)
            with _BUILDING:
                loader = AutoModelForImageTextToText if _has_vision(named) else AutoModelForCausalLM
                model = loader.from_pretrained(named, dtype=torch.float32, **source)
    except Exception as error:
        if gguf is None and not isinstance(error, OSError):
            raise
        # OSError: not on the hub, no network and not cached, no such repo; anything else
        # from a GGUF file: gguf could not parse it, or transformers does not map its architecture
        reason = " ".join(str(error).split())
        reason = reason if len(reason) <= 240 else reason[:237] + "..."
        raise ConfigError(f"--model {path!r}: cannot load it ({reason})") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers parses a GGUF file's metadata (a whole vocabulary) again for the
    tokenizer's config, the tokenizer, the model's config and the weights, and builds
    gguf's tensor-name map again for every module: within this context each is built once
    per file and reused (the same read-only reader), which loads the same tensors in
    about two thirds of the time."""
    import gguf

    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader, gguf.get_tensor_name_map = functools.cache(reader), functools.cache(names)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, names


def load_tokenizer(path: str, **source):
    """The tokenizer saved at ``path`` (OSError where there is none); ``source`` names a
    GGUF file in it (``gguf_file=``)."""
    if not source and _saved_as_plain_tokenizers(path):
        # AutoTokenizer swaps in the model family's own tokenizer class for some model
        # types (Qwen2 among them), which would re-tokenize a locally built vocabulary.
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path, **source)


def _local_config(path: str) -> dict | None:
    """The ``config.json`` of a local checkpoint at ``path``; None for a hub id."""
    config = Path(path).expanduser() / "config.json"
    return json.loads(config.read_text()) if config.is_file() else None


def _has_vision(path: str) -> bool:
    """Whether the checkpoint at ``path`` is an image-text-to-text model (a vision tower in
    its config), which AutoModelForCausalLM does not load."""
    return "vision_config" in (_local_config(path) or {})


def reads_text_only(path: str) -> bool:
    """Whether ``path`` is a local checkpoint without a vision tower (a hub id is not
    looked up here: loading it says what it is)."""
    config = _local_config(path)
    return config is not None and "vision_config" not in config


def image_text_problem(path: str) -> str | None:
    """Why the local checkpoint at ``path`` cannot read image observations (no vision
    tower, or a model with one that is not image-text-to-text, such as CLIP), or None."""
    config = _local_config(path)
    if config is None:
        return None
    if "vision_config" not in config:
        return (f"--model {path!r} reads text only (its config.json has no vision_config): image "
                "observations need an image-text-to-text checkpoint (LLaVA or Qwen2-VL family), "
                "or env.options.observation 'text'")
    kind = config.get("model_type")
    if kind not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return (f"--model {path!r} is a {kind!r} model, not image-text-to-text (what "
                "AutoModelForImageTextToText loads): image observations need an image-text-to-text "
                "checkpoint (LLaVA or Qwen2-VL family), or env.options.observation 'text'")
    return None


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

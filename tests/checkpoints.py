"""Tiny checkpoints the tests save themselves, laid out as Hugging Face saves them."""

from __future__ import annotations

from pathlib import Path


def save_text_checkpoint(target: Path) -> Path:
    """A tiny text-only causal LM (no vision tower) and its tokenizer saved at ``target``."""
    from mirage.plugins.backend_local.model import build_tiny_model
    from mirage.plugins.backend_local.options import LocalOptions
    from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

    tokenizer = build_word_tokenizer(["a b c"])
    model = build_tiny_model(LocalOptions(hidden=16, layers=1, heads=2), len(tokenizer), tokenizer.pad_token_id,
                             tokenizer.eos_token_id, tokenizer.bos_token_id)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target

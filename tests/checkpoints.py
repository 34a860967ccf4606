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


CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def save_templated_checkpoint(target: Path) -> Path:
    """A tiny untrained causal LM whose word tokenizer (FrozenLake's demonstrations) has a
    ChatML-style chat template, saved at ``target``: a stand-in for a pretrained instruct model."""
    from mirage.core.config.run_config import EnvConfig
    from mirage.core.rl.demos import collect_demonstrations
    from mirage.envs.frozenlake import FrozenLake, FrozenLakeOptions
    from mirage.plugins.backend_local.model import build_tiny_model
    from mirage.plugins.backend_local.options import LocalOptions
    from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

    demos = collect_demonstrations(FrozenLake, FrozenLakeOptions(), EnvConfig(name="frozenlake"), 10, 0)
    tokenizer = build_word_tokenizer(c + "\n" + r for c, r in demos.pairs)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.add_tokens(["user", "assistant"])
    tokenizer.chat_template = CHAT_TEMPLATE
    model = build_tiny_model(LocalOptions(hidden=32, layers=1, heads=2), len(tokenizer), tokenizer.pad_token_id,
                             tokenizer.eos_token_id, tokenizer.bos_token_id)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target

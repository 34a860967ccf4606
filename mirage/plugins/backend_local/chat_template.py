"""Prompts rendered through a tokenizer's chat template (``env.chat_template``).

Instruct models (Qwen2.5-Instruct) were tuned on conversations, not raw text: the prompt
becomes one user message and the template's generation prompt opens the assistant's
turn. The context's trailing ``<think>`` moves after that opening, so the assistant's turn
starts inside its reasoning, as RAGEN prompts it, and the response the parser reads
(``Z </think> <answer> ... </answer>``) keeps its form.
"""

from __future__ import annotations

from mirage.core.rl.episode import THINK


def available(tokenizer) -> bool:
    """Whether ``tokenizer`` carries a chat template (the tiny policy's word tokenizer has none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def render(tokenizer, context: str) -> str:
    """``context`` as the text of a one-message conversation awaiting the assistant."""
    opened = context.endswith(THINK)
    body = context.removesuffix(THINK).rstrip("\n") if opened else context
    text = tokenizer.apply_chat_template([{"role": "user", "content": body}],
                                         add_generation_prompt=True, tokenize=False)
    return text + THINK if opened else text

"""``vllm.inputs.TokensPrompt``: a prompt given as token ids, with its pictures (if any)
as ``multi_modal_data``."""

from typing import Any, NotRequired, TypedDict


class TokensPrompt(TypedDict):
    prompt_token_ids: list[int]
    multi_modal_data: NotRequired[dict[str, Any]]

"""The add-on's settings: one typed model, every default in one place."""

from __future__ import annotations

import re
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mirage.core.config.run_config import FilterConfig

# Z is the text between the tags, and the format is valid when the answer follows
# (MIRAGE's own turn format, docs/writing-an-environment.md).
DEFAULT_REASONING = r"<think>(.*?)</think>\s*<answer>.*?</answer>"

ReasoningRule = str | Callable[[str], str | None]
_FILTER = FilterConfig.model_fields


class MirageOptions(BaseModel):
    """What :class:`~mirage.integrations.trl.trainer.MirageGRPOTrainer` adds to GRPO.

    ``reasoning`` says where Z sits in a completion: a regular expression whose group 1
    is the reasoning (searched with ``re.DOTALL``; a completion it does not match has no
    reasoning and counts as format-invalid), or a function from the completion's text to
    its reasoning (a substring of it; None when there is none).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    every: int = Field(5, ge=1, description="diagnose the generation that feeds every every-th step")
    filter: str = Field("none", description="a registered MIRAGE filter (docs/filters.md): none, top_p, top_k, ...")
    # the filter's shared settings are a MIRAGE run's (filter section): one set of bounds,
    # defaults and choices
    rho: float = _FILTER["rho"]
    score: Literal["variance", "std"] = _FILTER["score"]
    include_zero: bool = _FILTER["include_zero"]
    keep: Literal["largest", "smallest"] = _FILTER["keep"]
    filter_options: dict[str, Any] = _FILTER["options"]
    reasoning: ReasoningRule = Field(DEFAULT_REASONING, description="a regex (group 1: Z) or a function")
    score_batch_size: int = Field(16, ge=1, description="(prompt, reasoning) pairs per scoring forward")
    zscore_epsilon: float = Field(1e-3, gt=0, description="MI-ZScore: added to std(marginal)")

    @field_validator("reasoning")
    @classmethod
    def _reasoning_rule(cls, rule: ReasoningRule) -> ReasoningRule:
        if callable(rule):
            return rule
        try:
            groups = re.compile(rule, re.DOTALL).groups
        except re.error as error:
            raise ValueError(f"reasoning is not a regular expression: {error}") from None
        if groups < 1:
            raise ValueError("reasoning: the regular expression needs a group (group 1 is the reasoning)")
        return rule

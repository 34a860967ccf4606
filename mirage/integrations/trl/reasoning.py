"""Where the reasoning Z sits in a completion, by a regex or a user function."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mirage.integrations.trl.options import ReasoningRule


@dataclass(frozen=True)
class Split:
    """One completion seen as ``prefix + reasoning + rest``.

    ``prefix``: the text before Z (``<think>`` in the default format), scored as part of
    the context X; ``reasoning``: Z; ``valid``: whether the completion has the format.
    """

    prefix: str
    reasoning: str
    valid: bool


NO_REASONING = Split(prefix="", reasoning="", valid=False)


def split_completion(text: str, rule: ReasoningRule) -> Split:
    """Split ``text`` by ``rule`` (:class:`~mirage.integrations.trl.options.MirageOptions`'s
    ``reasoning``). A regex that does not match, or a function returning None or text that
    is not in the completion, gives :data:`NO_REASONING`; a function's answer counts as a
    valid format."""
    if callable(rule):
        reasoning = rule(text)
        start = -1 if reasoning is None else text.find(reasoning)
        if start < 0:
            return NO_REASONING
        return Split(prefix=text[:start], reasoning=reasoning, valid=True)
    match = re.search(rule, text, re.DOTALL)
    if match is None or match.group(1) is None:
        return NO_REASONING
    return Split(prefix=text[:match.start(1)], reasoning=match.group(1), valid=True)

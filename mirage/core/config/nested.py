"""Reading nested config data (JSON-like dicts) by dotted path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MISSING = object()
"""What :func:`lookup` returns for a path the data does not hold (None is a value)."""


def lookup(data: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path`` in nested config data, or ``MISSING``."""
    for part in path.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return MISSING
        data = data[part]
    return data

"""Resolved run configs as flat ``dotted.path -> value`` maps: diffs and grid axes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

# Replicates differ in their seed; it is never a grid axis of the pivot.
REPLICATE_PATHS = frozenset({"seed"})


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"filter": {"rho": 0.9}}`` -> ``{"filter.rho": 0.9}``; an empty mapping stays a value."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat |= flatten(value, f"{path}.")
        else:
            flat[path] = value
    return flat


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def diff(left: Mapping[str, Any], right: Mapping[str, Any]) -> pd.DataFrame:
    """Paths whose values differ (a path missing on one side shows as ``(absent)``):
    columns path, left, right, as JSON text, sorted by path."""
    a, b = flatten(left), flatten(right)
    rows = [
        (path, _text(a[path]) if path in a else "(absent)",
         _text(b[path]) if path in b else "(absent)")
        for path in sorted(a.keys() | b.keys())
        if path not in a or path not in b or _text(a[path]) != _text(b[path])
    ]
    return pd.DataFrame(rows, columns=["path", "left", "right"])


def varying_paths(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Dotted paths to plain values that differ between the configs (the seed and empty
    mappings excluded), sorted."""
    flats = [{path: value for path, value in flatten(config).items()
              if not isinstance(value, Mapping)} for config in configs]
    paths = set().union(*flats) if flats else set()
    return sorted(
        path for path in paths - REPLICATE_PATHS
        if len({_text(flat.get(path)) for flat in flats}) > 1
    )

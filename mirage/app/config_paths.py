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


def _plain(configs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Each config flattened to ``path -> JSON text`` of its plain values."""
    return [{path: _text(value) for path, value in flatten(config).items()
             if not isinstance(value, Mapping)} for config in configs]


def _split(flats: Sequence[Mapping[str, str]], path: str) -> tuple[int, ...]:
    """How ``path`` splits the runs: each run's value as the index of its first sighting."""
    seen: dict[str | None, int] = {}
    return tuple(seen.setdefault(flat.get(path), len(seen)) for flat in flats)


def _one_per_split(paths: Sequence[str], flats: Sequence[Mapping[str, str]]) -> list[str]:
    """Of paths that split the runs identically (``filter.name`` and ``filter.rho`` of a
    none-vs-top_p pair), keep one: they are one axis. A component's ``name`` first (the
    choice its settings follow from), then the shortest path."""
    kept: dict[tuple[int, ...], str] = {}
    for path in sorted(paths, key=lambda p: (not p.endswith(".name"), len(p), p)):
        kept.setdefault(_split(flats, path), path)
    return sorted(kept.values())


def axes(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The paths worth pivoting or grouping on: varying (seed aside), present in every
    config (a path only some runs have follows from another choice, such as the
    environment's name), one path per distinct way of splitting the runs; sorted."""
    flats = _plain(configs)
    everywhere = [path for path in varying_paths(configs) if all(path in f for f in flats)]
    return _one_per_split(everywhere, flats)


def determined_by(path: str, chosen: Sequence[str], flats: Sequence[Mapping[str, str]]) -> bool:
    """Whether runs equal on every ``chosen`` path are also equal on ``path``."""
    values: dict[tuple, str | None] = {}
    for flat in flats:
        key = tuple(flat.get(p) for p in chosen)
        if values.setdefault(key, flat.get(path)) != flat.get(path):
            return False
    return True


def unchosen(configs: Sequence[Mapping[str, Any]], chosen: Sequence[str]) -> list[str]:
    """Paths on which runs equal on every ``chosen`` path still differ (seed aside), one
    per way of splitting the runs: runs that differ on them are not replicates."""
    flats = _plain(configs)
    free = [path for path in varying_paths(configs)
            if path not in chosen and not determined_by(path, chosen, flats)]
    return _one_per_split(free, flats)


def moving_with(configs: Sequence[Mapping[str, Any]], chosen: Sequence[str]) -> list[str]:
    """Paths (not chosen, seed aside) whose value changes only together with the chosen
    paths among these configs: a comparison along ``chosen`` measures them too."""
    flats = _plain(configs)
    rest = unchosen(configs, chosen)
    return [path for path in varying_paths(configs)
            if path not in chosen and determined_by(path, chosen, flats)
            and not determined_by(path, rest, flats)]

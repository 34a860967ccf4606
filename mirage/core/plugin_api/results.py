"""Strict checks on what plugins hand back to the run loop: selections and metrics.

A plugin's result is trusted nowhere else, so a bad one must stop the run here, with one
line naming the plugin and the bad value, rather than be half-used (a negative group index
silently selects from the end; an infinite metric poisons every chart).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from mirage.core.errors import PluginResultError
from mirage.core.rl.batch import Batch, Selection

# Segments of letters, digits, ``_ . @ -`` joined by single slashes (docs/metrics.md):
# ``filter/kept_ratio``, ``mi/first_turn/recall@2``.
METRIC_NAME = re.compile(r"[A-Za-z0-9_.@-]+(/[A-Za-z0-9_.@-]+)*")
METRIC_NAME_MAX = 200


class CheckedMetrics(dict):
    """Metrics that were checked where they were measured, by code that could name what
    measured each (the built-in ``mirage_diagnose`` names each diagnostic):
    ``check_metrics`` lets them through, so no metric is checked twice."""


def check_selection(selection: Any, batch: Batch, source: str) -> None:
    """Raise PluginResultError unless ``selection`` is a Selection whose group indices are
    unique integers in ``range(P)`` and whose per-group samples are unique integers in
    ``range(G)`` of kept groups; its metrics are checked with ``check_metrics``."""
    if problem := _selection_problem(selection, batch):
        raise PluginResultError(f"{source} returned an invalid selection at step {batch.step}: {problem}")
    check_metrics(selection.metrics, source, batch.step)


def check_metrics(metrics: Any, source: str, step: int) -> None:
    """Raise PluginResultError unless ``metrics`` maps well-formed names to real numbers
    that are finite or NaN (NaN means undefined: the store does not keep it)."""
    if metrics is None or isinstance(metrics, CheckedMetrics):
        return
    if not isinstance(metrics, Mapping):
        raise PluginResultError(f"{source} returned metrics that are not a mapping at step {step}: "
                                f"{_shown(metrics)}")
    for name, value in metrics.items():
        if problem := _metric_problem(name, value):
            raise PluginResultError(f"{source} returned a bad metric at step {step}: {problem}")


def _selection_problem(selection: Any, batch: Batch) -> str | None:
    if not isinstance(selection, Selection):
        return f"expected a Selection, got {_shown(selection)}"
    groups = len(batch.groups)
    if problem := _indices_problem(selection.kept_groups, groups, "kept_groups"):
        return problem
    if not isinstance(selection.kept_samples, Mapping):
        return f"kept_samples is not a mapping: {_shown(selection.kept_samples)}"
    kept = set(selection.kept_groups)
    for group, samples in selection.kept_samples.items():
        if not _is_index(group) or group not in kept:
            return (f"kept_samples has key {group!r}, which is not one of the kept groups "
                    f"{sorted(kept)}")
        size = len(batch.groups[group].trajectories)
        if problem := _indices_problem(samples, size, f"kept_samples[{group}]"):
            return problem
    return None


def _indices_problem(indices: Any, size: int, where: str) -> str | None:
    if not isinstance(indices, (list, tuple)):
        return f"{where} is not a list: {_shown(indices)}"
    seen: set[int] = set()
    for position, index in enumerate(indices):
        if not _is_index(index):
            return f"{where}[{position}] = {index!r} is not an integer"
        if not 0 <= index < size:
            return f"{where}[{position}] = {index!r} is out of range 0..{size - 1}"
        if index in seen:
            return f"{where}[{position}] = {index!r} is a duplicate"
        seen.add(index)
    return None


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _metric_problem(name: Any, value: Any) -> str | None:
    if not isinstance(name, str) or len(name) > METRIC_NAME_MAX or not METRIC_NAME.fullmatch(name):
        return (f"name {name!r} is not well formed (segments of letters, digits, '_.@-' "
                f"joined by '/', at most {METRIC_NAME_MAX} characters)")
    if isinstance(value, (bool, str, bytes)) or value is None:
        return f"{name} = {_shown(value)} is not a number"
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of many elements
        return f"{name} = {_shown(value)} is not a number"
    if math.isinf(number):
        return f"{name} = {number!r} is not finite"
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

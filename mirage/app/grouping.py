"""Curves of many runs as one line per group: smoothing and the mean with a band.

SQL (:func:`mirage.app.queries.series`) already cut each run to at most
``AppConfig.max_points`` points; what is left here is per-point work on those small
frames: an exponential moving average along each run, then the mean and spread over
the runs of each group at each step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from mirage.app.config_paths import flatten

BANDS = ("standard error", "min-max", "none")
EACH_RUN = "(each run)"


def smooth(frame: pd.DataFrame, weight: float) -> pd.DataFrame:
    """``value`` replaced by its debiased EMA along each run and name in step order
    (TensorBoard's smoothing: weight 0 leaves it, 0.9 averages over about 10 points)."""
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    if weight == 0 or frame.empty:
        return frame
    ordered = frame.sort_values(["run_id", "name", "step"])
    smoothed = ordered.groupby(["run_id", "name"])["value"].transform(
        lambda values: values.ewm(alpha=1 - weight, adjust=True).mean())
    return ordered.assign(value=smoothed)


def config_groups(configs: Mapping[str, Mapping[str, Any]], path: str) -> dict[str, str]:
    """run id -> ``path=value`` of its config (``(absent)`` when it has no such path)."""
    def value(config: Mapping[str, Any]) -> str:
        flat = flatten(config)
        if path not in flat:
            return "(absent)"
        return flat[path] if isinstance(flat[path], str) else json.dumps(flat[path], default=str)
    return {run_id: f"{path}={value(config)}" for run_id, config in configs.items()}


def column_groups(runs: pd.DataFrame, column: str) -> dict[str, str]:
    """run id -> ``column=value`` of a runs-table column (a list, such as tags, joined)."""
    def text(value: Any) -> str:
        if isinstance(value, list | tuple | np.ndarray):
            return ",".join(map(str, value)) or "(none)"
        return "(none)" if value is None or (isinstance(value, float) and np.isnan(value)) \
            else str(value)
    return {run_id: f"{column}={text(value)}"
            for run_id, value in zip(runs["run_id"], runs[column])}


def banded(frame: pd.DataFrame, groups: Mapping[str, str], band: str) -> pd.DataFrame:
    """Per group, name and step: the mean over its runs, the band and how many runs
    logged the point. Columns group, name, step, x (mean over the runs), mean, low,
    high, runs. ``band``: standard error (mean ± sample std / sqrt(runs); no band at
    one run), min-max, or none (low = high = mean)."""
    if band not in BANDS:
        raise ValueError(f"unknown band {band!r}; valid: {', '.join(BANDS)}")
    data = frame.assign(group=frame["run_id"].map(groups))
    stats = data.groupby(["group", "name", "step"], sort=True).agg(
        x=("x", "mean"), mean=("value", "mean"), sd=("value", "std"),
        low=("value", "min"), high=("value", "max"), runs=("run_id", "nunique"),
    ).reset_index()
    if band == "standard error":
        error = (stats["sd"] / np.sqrt(stats["runs"])).fillna(0.0)
        stats["low"], stats["high"] = stats["mean"] - error, stats["mean"] + error
    elif band == "none":
        stats["low"] = stats["high"] = stats["mean"]
    return stats.drop(columns="sd")

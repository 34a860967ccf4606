"""Smoothing and the grouped mean with its band (mirage/app/grouping.py), and the fixed
colour scale (mirage/app/colours.py), on hand-checked frames."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from mirage.app import grouping
from mirage.app.colours import PALETTE, colours_for


def frame(rows):
    return pd.DataFrame(rows, columns=["run_id", "name", "step", "x", "value"])


def test_smoothing_is_a_debiased_ema_along_each_run():
    data = frame([("a", "m", 0, 0, 1.0), ("a", "m", 1, 1, 3.0), ("a", "m", 2, 2, 3.0),
                  ("b", "m", 0, 0, 10.0), ("b", "m", 1, 1, 0.0)])
    smoothed = grouping.smooth(data, 0.5).set_index(["run_id", "step"])["value"]
    assert smoothed[("a", 0)] == 1.0  # the first point is itself (debiased)
    assert smoothed[("a", 1)] == pytest.approx((0.5 * 1 + 3) / 1.5)
    assert smoothed[("a", 2)] == pytest.approx((0.25 * 1 + 0.5 * 3 + 3) / 1.75)
    assert smoothed[("b", 1)] == pytest.approx(10 * 0.5 / 1.5)  # runs never mix
    assert grouping.smooth(data, 0.0) is data
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        grouping.smooth(data, 1.0)


def test_band_is_the_standard_error_or_the_range_over_a_groups_runs():
    data = frame([("a", "m", 1, 10, 1.0), ("b", "m", 1, 20, 3.0), ("c", "m", 1, 30, 8.0)])
    groups = {"a": "g=1", "b": "g=1", "c": "g=2"}
    se = grouping.banded(data, groups, "standard error").set_index("group")
    error = math.sqrt(2) / math.sqrt(2)  # sample std of (1, 3) over sqrt(2) runs
    assert se.loc["g=1", ["x", "mean", "low", "high", "runs"]].tolist() == pytest.approx(
        [15, 2, 2 - error, 2 + error, 2])
    assert se.loc["g=2", ["mean", "low", "high", "runs"]].tolist() == [8, 8, 8, 1]
    span = grouping.banded(data, groups, "min-max").set_index("group")
    assert span.loc["g=1", ["low", "high"]].tolist() == [1, 3]
    with pytest.raises(ValueError, match="valid: standard error, min-max, none"):
        grouping.banded(data, groups, "iqr")


def test_groups_from_a_config_path_or_a_runs_column():
    configs = {"a": {"filter": {"name": "top_p", "rho": 0.9}}, "b": {"filter": {"name": "none"}}}
    assert grouping.config_groups(configs, "filter.rho") == {
        "a": "filter.rho=0.9", "b": "filter.rho=(absent)"}
    runs = pd.DataFrame({"run_id": ["a", "b"], "tags": [["x", "y"], []]})
    assert grouping.column_groups(runs, "tags") == {"a": "tags=x,y", "b": "tags=(none)"}


def test_each_label_keeps_one_colour():
    colours = colours_for(["r2", "r1", "r2", "r3"])
    assert colours.labels == ("r2", "r1", "r3")
    assert [colours.colour(label) for label in ("r2", "r1", "r3")] == list(PALETTE[:3])
    scale = colours.scale().to_dict()
    assert scale == {"domain": ["r2", "r1", "r3"], "range": list(PALETTE[:3])}
    many = colours_for(str(i) for i in range(len(PALETTE) + 1))
    assert many.colour(str(len(PALETTE))) == PALETTE[0]  # beyond the palette they repeat

"""The researcher's workbench views on a store written through the RunStore API with
hand-checked values: the metric explorer's grouped mean and band, its x axes, one colour
per run on every chart, the picker after narrowing, and the paired difference by seed."""

from __future__ import annotations

import json
import math

import pytest
from app_testing import chart_data, infos, open_app, rerun
from bench_store import G, LIFT, P, SECONDS_PER_STEP, SEEDS, final_success, lake, train_success

from mirage.app.colours import PALETTE
from mirage.report.paired import paired


def explore(at, metrics: list[str], group: str, **controls):
    at.multiselect(key="explore_metrics").set_value(metrics)
    at.selectbox(key="explore_group").set_value(group)
    for key, value in controls.items():
        widget = at.slider(key=key) if key == "explore_smooth" else at.selectbox(key=key)
        widget.set_value(value)
    return chart_data(rerun(at))


def test_grouped_mean_with_standard_error_and_min_max_bands(bench_store, monkeypatch):
    at = open_app(bench_store.path, monkeypatch)
    charts = explore(at, ["train/success"], "filter.name")
    band = charts["train/success by filter.name"].set_index(["group", "step"])
    assert set(band.index.get_level_values("group")) == {"filter.name=none", "filter.name=top_p"}
    for step in range(5):
        row = band.loc[("filter.name=top_p", step)]
        mean = 0.1 * step + 0.2 + 0.01  # seeds 0, 1, 2 add 0.00, 0.01, 0.02
        error = 0.01 / math.sqrt(3)  # sample std 0.01 over three runs
        assert (row["mean"], row["low"], row["high"], row["runs"]) == (
            pytest.approx(mean), pytest.approx(mean - error), pytest.approx(mean + error), 3)
    charts = explore(at, ["train/success"], "filter.name", explore_band="min-max")
    row = charts["train/success by filter.name"].set_index(["group", "step"]).loc[
        ("filter.name=none", 2)]
    assert (row["low"], row["high"]) == (pytest.approx(0.2), pytest.approx(0.22))
    assert any("filter.name=none (3), filter.name=top_p (3)" in c.value for c in at.caption)


def test_metric_explorer_charts_any_metric_on_each_x_axis(bench_store, monkeypatch):
    at = open_app(bench_store.path, monkeypatch)
    run = lake("top_p", 1)
    per_run = explore(at, ["train/success", "time/step"], "(each run)")
    assert {"train/success per run", "time/step per run"} <= per_run.keys()
    curve = per_run["train/success per run"]
    curve = curve[curve["group"].str.startswith(run)].sort_values("step")
    assert curve["mean"].tolist() == pytest.approx([train_success("top_p", 1, s) for s in range(5)])
    assert curve["x"].tolist() == [0, 1, 2, 3, 4]
    for x_axis, expected in (("wall time (min)", [SECONDS_PER_STEP * s / 60 for s in range(5)]),
                             ("trajectories seen", [P * G * (s + 1) for s in range(5)])):
        curve = explore(at, ["train/success"], "(each run)", explore_x=x_axis)[
            "train/success per run"]
        curve = curve[curve["group"].str.startswith(run)].sort_values("step")
        assert curve["x"].tolist() == pytest.approx(expected), x_axis
    smoothed = explore(at, ["train/success"], "(each run)", explore_x="step",
                       explore_smooth=0.5)["train/success per run"]
    smoothed = smoothed[smoothed["group"].str.startswith(run)].sort_values("step")
    raw = [train_success("top_p", 1, s) for s in range(2)]
    # debiased EMA at weight 0.5: step 1 is (0.5 * x0 + x1) / 1.5
    assert smoothed["mean"].iloc[1] == pytest.approx((0.5 * raw[0] + raw[1]) / 1.5)


def colour_of_each_label(at) -> dict[str, dict[str, str]]:
    """Chart title -> {legend label: colour} from the explicit colour scales."""
    found = {}
    for element in at.get("vega_lite_chart"):
        spec = json.loads(element.proto.spec)
        title = spec["title"]["text"] if isinstance(spec["title"], dict) else spec["title"]
        for layer in [spec, *spec.get("layer", [])]:
            scale = layer.get("encoding", {}).get("color", {}).get("scale")
            if scale and "domain" in scale:
                found[title] = dict(zip(scale["domain"], scale["range"]))
    return found


def test_a_run_keeps_its_colour_on_every_chart(bench_store, monkeypatch):
    at = open_app(bench_store.path, monkeypatch)
    at.multiselect(key="explore_metrics").set_value(["train/success"])
    colours = colour_of_each_label(rerun(at))
    per_run = colours["train/success per run"]
    assert len(per_run) == 6 and len(set(per_run.values())) == 6
    assert colours["Validation success"] == per_run  # the same run, the same colour
    # a chart holding only some runs still colours each run as the others do
    at.multiselect(key="runs").set_value([lake("top_p", 2), lake("none", 0)])
    colours = colour_of_each_label(rerun(at))
    assert colours["Validation success"] == colours["train/success per run"]
    table = at.table[0]
    assert table.value["run"].tolist() == [lake("top_p", 2), lake("none", 0)]
    assert list(colours["Validation success"].values()) == list(PALETTE[:2])


def test_group_colours_are_shared_by_the_grouped_charts(bench_store, monkeypatch):
    at = open_app(bench_store.path, monkeypatch)
    explore(at, ["train/success", "val/success"], "filter.name")
    colours = colour_of_each_label(at)
    expected = {"filter.name=none": PALETTE[0], "filter.name=top_p": PALETTE[1]}
    assert colours["train/success by filter.name"] == expected
    assert colours["val/success by filter.name"] == expected


def test_narrowing_the_picker_selects_the_newest_matching_runs(bench_store, monkeypatch):
    at = open_app(bench_store.path, monkeypatch)
    assert set(at.multiselect(key="runs").value) == {
        lake(f, s) for f in LIFT for s in SEEDS}  # the six newest: FrozenLake
    at.multiselect(key="facet_env").set_value(["sokoban"])
    at.multiselect(key="facet_filter").set_value(["none", "top_p"])
    rerun(at)
    assert at.multiselect(key="runs").value == ["a-sokoban-top_p", "a-sokoban-none"]
    assert "Pick one or more runs in the sidebar." not in infos(at)
    assert set(chart_data(at)["Validation success"]["run_id"]) == {
        "a-sokoban-none", "a-sokoban-top_p"}
    at.multiselect(key="runs").set_value([])  # an explicit empty choice is kept
    assert "Pick one or more runs in the sidebar." in infos(rerun(at))


def test_run_table_lists_the_config_values_that_differ(bench_store, monkeypatch):
    at = open_app(bench_store.path, monkeypatch)
    table = at.table[0].value.set_index("run")
    assert list(table.columns) == ["status", "progress", "seed", "filter.name"]
    assert table.loc[lake("top_p", 1)].tolist() == ["finished", "step 4/4", "1", "top_p"]


def test_paired_difference_across_seeds(bench_store, monkeypatch):
    at = open_app(bench_store.path, monkeypatch)
    assert at.selectbox(key="paired_b").value == "filter.name=none"
    assert at.selectbox(key="paired_a").value == "filter.name=top_p"
    table = next(df.value for df in at.dataframe if "mean difference" in df.value.columns)
    expected = paired({s: final_success("top_p", s) for s in SEEDS},
                      {s: final_success("none", s) for s in SEEDS})
    row = table.iloc[0]
    assert row["seeds"] == 3 and row["mean difference"] == pytest.approx(0.4)
    assert (row["t low"], row["t high"]) == (pytest.approx(expected.low),
                                             pytest.approx(expected.high))
    statement = next(md.value for md in at.markdown if "minus" in md.value)
    assert f"+0.400, 95% interval [{expected.low:+.3f}, {expected.high:+.3f}] over 3 paired seeds" \
        in statement

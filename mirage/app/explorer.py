"""The metric explorer: any logged metric over steps, wall time or trajectories seen,
one line per run or the mean with a band per group of runs, optionally smoothed.

Two metrics side by side on the same x answer questions such as "did MI fall before
success?". The controls start from the page's query parameters when given (``?metrics=
val/success,mi/first_turn/mi_est&group=filter.name&band=min-max&x=step&smooth=0.6``),
so a view can be linked.
"""

from __future__ import annotations

import json

import streamlit as st

from mirage.app import charts, grouping, queries
from mirage.app.colours import colours_for
from mirage.app.config_paths import axes, varying_paths
from mirage.app.picker import Selection

# runs-table columns a group can be (a column the store lacks is left out: see
# queries.OPTIONAL_RUN_COLUMNS)
GROUP_COLUMNS = ("experiment", "tags", "name")
COLUMN = "column:"  # option prefix of a runs-table column among the config paths
PER_ROW = 2


def _param(name: str, options: list[str], default: str) -> int:
    """Index of the query parameter ``name`` among ``options`` (else of ``default``)."""
    wanted = st.query_params.get(name, default)
    return options.index(wanted) if wanted in options else options.index(default)


def _smoothing() -> float:
    """``?smooth=W`` when it is a weight in [0, 0.99], else 0 (no smoothing)."""
    try:
        weight = float(st.query_params.get("smooth", 0.0))
    except ValueError:
        return 0.0
    return weight if 0.0 <= weight <= 0.99 else 0.0


def _default_metrics(sel: Selection) -> list[str]:
    linked = [name for name in st.query_params.get("metrics", "").split(",") if sel.has(name)]
    if linked:
        return linked
    wanted = ("val/success", f"mi/{sel.scope}/mi_est", "train/success")
    return [name for name in wanted if sel.has(name)][:2] or sorted(sel.names)[:1]


def _group_options(sel: Selection, configs: dict[str, dict]) -> list[str]:
    meaningful = axes(list(configs.values()))
    other = [p for p in varying_paths(list(configs.values())) if p not in meaningful]
    columns = [f"{COLUMN}{c}" for c in GROUP_COLUMNS
               if c in sel.runs.columns and sel.runs[c].astype(str).nunique() > 1]
    return [grouping.EACH_RUN, *meaningful, *other, *columns]


def _groups(sel: Selection, configs: dict[str, dict], key: str) -> dict[str, str]:
    if key == grouping.EACH_RUN:
        return sel.labels
    if key.startswith(COLUMN):
        return grouping.column_groups(sel.runs, key.removeprefix(COLUMN))
    return grouping.config_groups(configs, key)


def metric_explorer(sel: Selection) -> None:
    st.subheader("Metric explorer")
    configs = {row["run_id"]: json.loads(row["config"])
               for _, row in queries.configs(sel.reader, sel.run_ids).iterrows()}
    names = sorted(sel.names)
    if not names:
        st.info("The selected runs logged no metrics yet.")
        return
    metrics = st.multiselect("metrics", names, default=_default_metrics(sel),
                             key="explore_metrics")
    options = _group_options(sel, configs)
    pick_group, pick_band, pick_x, pick_smooth = st.columns(4)
    key = pick_group.selectbox(
        "group by", options, index=_param("group", options, grouping.EACH_RUN),
        format_func=lambda o: o.removeprefix(COLUMN) + (" (run)" if o.startswith(COLUMN) else ""),
        key="explore_group")
    bands = list(grouping.BANDS)
    band = pick_band.selectbox("band", bands, index=_param("band", bands, bands[0]),
                               key="explore_band", disabled=key == grouping.EACH_RUN)
    x_axes = list(queries.X_AXES)
    x_axis = pick_x.selectbox("x axis", x_axes, index=_param("x", x_axes, "step"),
                              key="explore_x")
    weight = pick_smooth.slider("EMA smoothing", 0.0, 0.99, _smoothing(), 0.01,
                                key="explore_smooth")
    if not metrics:
        st.info("Pick one or more metrics to chart.")
        return
    groups = _groups(sel, configs, key)
    colours = sel.colours if key == grouping.EACH_RUN else colours_for(sorted(set(groups.values())))
    frame = grouping.smooth(queries.series(sel.reader, sel.run_ids, metrics, x_axis,
                                           sel.settings.max_points), weight)
    stats = grouping.banded(frame, groups, "none" if key == grouping.EACH_RUN else band)
    if key != grouping.EACH_RUN:
        sizes = {label: list(groups.values()).count(label) for label in colours.labels}
        st.caption("Runs per group: " + ", ".join(f"{label} ({n})" for label, n in sizes.items())
                   + f"; band: {band}.")
    legend = "run" if key == grouping.EACH_RUN else key.removeprefix(COLUMN)
    for start in range(0, len(metrics), PER_ROW):
        for column, metric in zip(st.columns(PER_ROW), metrics[start:start + PER_ROW]):
            with column:
                data = stats[stats["name"] == metric]
                title = f"{metric} by {legend}" if key != grouping.EACH_RUN else f"{metric} per run"
                st.altair_chart(charts.grouped_lines(data, title, x_axis, metric, colours, legend),
                                width="stretch")

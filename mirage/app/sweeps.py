"""Sweep views: final return against FrozenLake's slip with the filter on and off
(PAPER.md finding 7), and a pivot of any final metric over two grid axes with the
replicate mean and spread."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from mirage.app import charts, queries
from mirage.app.config_paths import axes, unchosen
from mirage.app.hints import missing
from mirage.app.picker import Selection

FINALS = ("val/success", "val/return", "val_greedy/success", "val_greedy/return",
          "train/success", "train/return")


def _finals(sel: Selection) -> list[str]:
    return [name for name in FINALS if sel.has(name)]


def stochasticity(sel: Selection) -> None:
    st.subheader("Stochasticity: final return vs slip")
    finals = _finals(sel)
    if not finals:
        missing("val/return")
        return
    default = finals.index("val/return") if "val/return" in finals else 0
    metric = st.selectbox("final metric", finals, index=default, key="slip_metric")
    frame = queries.slip_sweep(sel.reader, sel.run_ids, metric)
    if frame["slip"].nunique() < 2:
        st.info("Select FrozenLake runs at two or more slip probabilities (the `stochasticity` "
                "sweep, or runs with `--env-opt slip=...`) to see this view.")
        return
    st.altair_chart(charts.sweep_lines(frame, f"Final {metric} vs slip (mean ± std over seeds)",
                                       f"final {metric}"), width="stretch")


def _ordered(values: pd.Series) -> list[str]:
    """Axis values in numeric order when they are numbers, else as text."""
    def key(text: str) -> tuple[int, float, str]:
        try:
            return (0, float(json.loads(text)), "")
        except (TypeError, ValueError, json.JSONDecodeError):
            return (1, 0.0, str(text))
    return sorted(values.astype(str).unique(), key=key)


def _rows(frame: pd.DataFrame, apart: list[str]) -> pd.Series:
    """Each cell's row: the row axis's value, then the values of the paths kept apart."""
    if not apart:
        return frame["b"]
    details = [", ".join(f"{path}={value}" for path, value in zip(apart, values))
               for values in frame["apart"]]
    return pd.Series([f"{b} · {detail}" if b else detail for b, detail in
                      zip(frame["b"], details)], index=frame.index)


def pivot(sel: Selection) -> None:
    """Axes are paths that vary in a way of their own (config_paths.axes); runs that
    also differ on a path not chosen as an axis are shown apart, never pooled."""
    st.subheader("Grid pivot: final metric over two axes")
    finals = _finals(sel)
    if not finals:
        missing("val/success")
        return
    configs = [json.loads(text) for text in queries.configs(sel.reader, sel.run_ids)["config"]]
    choices = axes(configs)
    if not choices:
        st.info("The selected runs share one config (seeds aside): select runs from a grid, "
                "e.g. a sweep's experiment, to pivot over its axes.")
        return
    pick_metric, pick_a, pick_b = st.columns(3)
    metric = pick_metric.selectbox("final metric", finals, key="pivot_metric")
    axis_a = pick_a.selectbox("columns", choices, key="pivot_a")
    rest = [axis for axis in choices if axis != axis_a]
    axis_b = pick_b.selectbox("rows", ["(none)", *rest], index=1 if rest else 0, key="pivot_b")
    axis_b = None if axis_b == "(none)" else axis_b
    apart = unchosen(configs, [axis_a] + ([axis_b] if axis_b else []))
    frame = queries.final_by_axes(sel.reader, sel.run_ids, metric, axis_a, axis_b, apart)
    if frame.empty:
        missing(metric)
        return
    if apart:
        st.caption("The runs also differ on " + ", ".join(f"`{path}`" for path in apart)
                   + ": runs that differ there are not replicates, so each combination "
                   "is a row of its own.")
    frame = frame.assign(a=frame["a"].astype(str), b=_rows(frame, apart).astype(str))
    a_order, b_order = _ordered(frame["a"]), _ordered(frame["b"])
    rows_title = " · ".join(filter(None, [axis_b, *apart]))
    heatmap = charts.pivot_heatmap(frame.drop(columns="apart"),
                                   f"Final {metric}: replicate mean ± std", axis_a, rows_title,
                                   a_order, b_order)
    st.altair_chart(heatmap, width="stretch")
    labels = [charts.spread_label(*row) for row in
              zip(frame["mean"], frame["spread"], frame["replicates"])]
    table = frame.assign(cell=labels).pivot(index="b", columns="a", values="cell")
    table = table.reindex(index=b_order, columns=a_order)
    st.dataframe(table.rename_axis(index=rows_title, columns=axis_a))

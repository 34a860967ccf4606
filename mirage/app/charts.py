"""Altair charts from the small frames of :mod:`mirage.app.queries`.

Every chart carries a title: it names the figure on the page, and the tests find a
chart's data by it.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from mirage.app.colours import Colours
from mirage.app.queries import PHASES

# Run legends below the plot, so side-by-side charts keep their full width for the data.
LEGEND = alt.Legend(orient="bottom", direction="vertical", labelLimit=400, labelFontSize=10)
STEP = alt.X("step:Q", title="step", axis=alt.Axis(tickMinStep=1, format="d"))
# Fit the width to the column, keep the plot's own height (Streamlit's default "fit" would
# squeeze the plot so that its legends fit the height too).
FIT_WIDTH = alt.AutoSizeParams(type="fit-x", contains="padding")
HEIGHT = 220
DASHES = ([1, 0], [6, 3], [2, 2], [8, 2, 2, 2])
DASH_NAMES = ("solid", "dashed", "dotted", "dash-dot")


# A group's legend symbol: its line in full colour (not the faint band)
GROUP_LEGEND = alt.Legend(orient="bottom", direction="vertical", labelLimit=400,
                          labelFontSize=10, symbolType="stroke", symbolOpacity=1,
                          symbolStrokeWidth=3)


def coloured(colours: Colours, field: str = "run", title: str = "run",
             legend: alt.Legend = LEGEND) -> alt.Color:
    """Colour by ``field`` (frames carry ``run``, each run's legend label: see
    picker.Selection.labelled) on the page's fixed scale."""
    return alt.Color(f"{field}:N", title=title, legend=legend, scale=colours.scale())


def series_labels(names: pd.Series) -> pd.Series:
    """Legend labels: the last part of each name when they all share the rest
    (``mi/first_turn/retrieval_acc`` -> ``retrieval_acc``), else the full names."""
    parents = {name.rpartition("/")[0] for name in names.unique()}
    return names.str.rpartition("/")[2] if len(parents) == 1 else names


def over_steps(frame: pd.DataFrame, title: str, y_title: str, colours: Colours,
               alarms: pd.DataFrame | None = None) -> alt.Chart | alt.LayerChart:
    """One line per run (a dash per metric name when there are several, named under
    the title) over steps; ``alarms`` (run_id, run, step, message) become dotted
    vertical rules."""
    data = frame.assign(series=series_labels(frame["name"]))
    series = list(dict.fromkeys(data["series"]))[: len(DASHES)]
    encodings = dict(
        x=STEP,
        y=alt.Y("value:Q", title=y_title, scale=alt.Scale(zero=False),
                axis=alt.Axis(format="~g")),
        color=coloured(colours),
        tooltip=["run_id", "name", "step", alt.Tooltip("value:Q", format=".4g")],
    )
    heading = alt.TitleParams(title)
    if len(series) > 1:  # the dash of each metric, named under the title
        encodings["strokeDash"] = alt.StrokeDash("series:N", legend=None, scale=alt.Scale(
            domain=series, range=list(DASHES[: len(series)])))
        heading = alt.TitleParams(title, subtitle=", ".join(
            f"{dash}: {name}" for dash, name in zip(DASH_NAMES, series)))
    chart = alt.Chart(data).mark_line(point=True).encode(**encodings).properties(height=HEIGHT)
    if alarms is not None and not alarms.empty:
        rules = alt.Chart(alarms[["run_id", "run", "step", "message"]]).mark_rule(
            strokeDash=[2, 3]).encode(x="step:Q", color=coloured(colours),
                                      tooltip=["run_id", "step", "message"])
        return alt.layer(chart, rules).properties(title=heading, autosize=FIT_WIDTH)
    return chart.properties(title=heading, autosize=FIT_WIDTH)


def connected(frame: pd.DataFrame, title: str, x_title: str, y_title: str,
              colours: Colours) -> alt.Chart:
    """Each run's path through (x, y), in step order (columns run_id, run, step, x, y)."""
    return alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("x:Q", title=x_title, scale=alt.Scale(zero=False)),
        y=alt.Y("y:Q", title=y_title, scale=alt.Scale(zero=False)),
        order="step:Q", color=coloured(colours), tooltip=["run_id", "step", "x", "y"],
    ).properties(title=title, height=HEIGHT, autosize=FIT_WIDTH)


def per_run_scatter(frame: pd.DataFrame, title: str, x_title: str, y_title: str,
                    colours: Colours) -> alt.Chart:
    """One point per run (columns run_id, run, x, y)."""
    return alt.Chart(frame).mark_circle(size=90).encode(
        x=alt.X("x:Q", title=x_title, scale=alt.Scale(zero=False)),
        y=alt.Y("y:Q", title=y_title), color=coloured(colours), tooltip=["run_id", "x", "y"],
    ).properties(title=title, height=HEIGHT, autosize=FIT_WIDTH)


def grad_bars(frame: pd.DataFrame, title: str, norm: str) -> alt.FacetChart:
    """Mean gradient norm per reward-variance bucket, task vs entropy vs KL, per run."""
    return alt.Chart(frame).mark_bar().encode(
        x=alt.X("bucket:N", title="reward-variance bucket"),
        xOffset="term:N",
        y=alt.Y("value:Q", title=f"mean gradient norm ({norm})"),
        color=alt.Color("term:N", title="loss term"),
        tooltip=["run_id", "bucket", "term", alt.Tooltip("value:Q", format=".4g"), "steps"],
    ).properties(width=320, height=220).facet(column=alt.Column("run:N", title=None)
                                              ).properties(title=title)


def sweep_lines(frame: pd.DataFrame, title: str, y_title: str) -> alt.LayerChart:
    """Replicate mean over slip per filter setting, with mean ± one sample std."""
    data = frame.assign(low=frame["mean"] - frame["spread"].fillna(0),
                        high=frame["mean"] + frame["spread"].fillna(0))
    base = alt.Chart(data).encode(
        x=alt.X("slip:Q", title="slip probability"),
        color=alt.Color("filtering:N", title="filter"),
    )
    lines = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title=y_title),
        tooltip=["filtering", "slip", alt.Tooltip("mean:Q", format=".3f"),
                 alt.Tooltip("spread:Q", format=".3f"), "replicates"],
    )
    bars = base.mark_errorbar().encode(y="low:Q", y2="high:Q")
    return alt.layer(lines, bars).properties(title=title, height=HEIGHT, autosize=FIT_WIDTH)


def spread_label(mean: float, spread: float, replicates: int) -> str:
    """``0.512 ± 0.031 (n=3)``; no spread for a single replicate."""
    return f"{mean:.3f}" + ("" if pd.isna(spread) else f" ± {spread:.3f}") + f" (n={replicates})"


def pivot_heatmap(frame: pd.DataFrame, title: str, a_title: str, b_title: str,
                  a_order: list[str], b_order: list[str]) -> alt.LayerChart:
    """Replicate mean per grid point of two axes (columns a, b, mean, spread,
    replicates), each cell labelled mean ± std (n)."""
    data = frame.assign(label=[spread_label(*row) for row in
                               zip(frame["mean"], frame["spread"], frame["replicates"])])
    base = alt.Chart(data).encode(x=alt.X("a:N", title=a_title, sort=a_order),
                                  y=alt.Y("b:N", title=b_title, sort=b_order))
    cells = base.mark_rect().encode(
        color=alt.Color("mean:Q", title="mean"),
        tooltip=["a", "b", "mean", "spread", "replicates"])
    text = base.mark_text(fontSize=12).encode(text="label:N")
    return alt.layer(cells, text).properties(title=title, height=max(120, 45 * len(b_order)),
                                             autosize=FIT_WIDTH)


def reward_histogram(frame: pd.DataFrame, title: str) -> alt.FacetChart:
    """Prompts per bin of mean return, early / middle / late, for each run."""
    return alt.Chart(frame).mark_bar().encode(
        x=alt.X("reward_bin:Q", bin="binned", title="prompt's mean return"),
        x2="reward_bin_end:Q",
        y=alt.Y("sum(prompts):Q", title="prompt groups"),
        color=alt.Color("spread:N", title="within-prompt returns"),
        tooltip=["run_id", "phase", "reward_bin", "spread", "prompts"],
    ).properties(width=220, height=160).facet(
        column=alt.Column("phase:N", sort=list(PHASES), title=None),
        row=alt.Row("run:N", title=None),
    ).properties(title=title)


def share_bars(frame: pd.DataFrame, title: str) -> alt.FacetChart:
    """Hard / mixed / easy prompt shares, early / middle / late, per run."""
    return alt.Chart(frame).mark_bar().encode(
        x=alt.X("phase:N", sort=list(PHASES), title=None),
        y=alt.Y("share:Q", title="share of prompts", stack="zero"),
        color=alt.Color("kind:N", title="prompts", scale=alt.Scale(
            domain=["hard", "mixed", "easy"], range=["#d62728", "#9ecae1", "#2ca02c"])),
        tooltip=["run_id", "phase", "kind", alt.Tooltip("share:Q", format=".2f")],
    ).properties(width=200, height=180).facet(column=alt.Column("run:N", title=None)
                                              ).properties(title=title)


def grouped_lines(frame: pd.DataFrame, title: str, x_title: str, y_title: str,
                  colours: Colours, legend_title: str) -> alt.LayerChart:
    """The mean of each group over x with its band (columns group, step, x, mean, low,
    high, runs; see grouping.banded), one colour per group on the page's scale."""
    base = alt.Chart(frame).encode(
        x=alt.X("x:Q", title=x_title, axis=alt.Axis(format="~g")),
        color=coloured(colours, "group", legend_title, GROUP_LEGEND),
    )
    band = base.mark_area(opacity=0.2).encode(y="low:Q", y2="high:Q")
    line = base.mark_line().encode(
        y=alt.Y("mean:Q", title=y_title, scale=alt.Scale(zero=False),
                axis=alt.Axis(format="~g")),
        tooltip=["group", "step", alt.Tooltip("x:Q", format=".4g"),
                 alt.Tooltip("mean:Q", format=".4g"), alt.Tooltip("low:Q", format=".4g"),
                 alt.Tooltip("high:Q", format=".4g"), "runs"],
    )
    return alt.layer(band, line).properties(title=title, height=HEIGHT, autosize=FIT_WIDTH)

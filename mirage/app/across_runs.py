"""Across runs: each run's MI proxy and entropy against its final success, and the
Spearman correlation of every diagnostic with final success (PAPER.md finding 4)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from mirage.app import charts, queries
from mirage.app.dynamics import ENTROPIES, MI_PROXIES, scoped
from mirage.app.hints import missing
from mirage.app.picker import Selection
from mirage.core.analysis.correlation import MIN_RUNS, diagnostic_success_correlation

TARGETS = ("val/success", "val_greedy/success", "val/return")


def _window(sel: Selection) -> tuple[int, int] | None:
    """Read diagnostics at each run's last value, or averaged over a chosen step window."""
    last_step = int(sel.runs["last_step"].fillna(0).max())
    how = st.radio("diagnostic value", ("last logged", "mean over steps"), horizontal=True,
                   key="corr_how")
    if how == "last logged" or last_step < 1:
        return None
    return st.slider("steps", 0, last_step, (0, last_step), key="corr_window")


def _scatter(summary: pd.DataFrame, diagnostic: str, target: str) -> pd.DataFrame:
    """Per run: x = the diagnostic, y = the final target."""
    x = summary[summary["name"] == diagnostic].set_index("run_id")["value"].rename("x")
    y = summary[summary["name"] == target].set_index("run_id")["value"].rename("y")
    return pd.concat([x, y], axis=1, join="inner").reset_index()


def diagnostics_vs_success(sel: Selection) -> None:
    st.subheader("Diagnostics vs final success, over runs")
    targets = [name for name in TARGETS if sel.has(name)]
    if not targets:
        missing("val/success")
        return
    pick_target, pick_mi, pick_entropy = st.columns(3)
    target = pick_target.selectbox("final", targets, key="corr_target")
    proxies, entropies = scoped(sel, MI_PROXIES), scoped(sel, ENTROPIES)
    window = _window(sel)
    summary = queries.run_summaries(sel.reader, sel.run_ids, target, window)
    left, right = st.columns(2)
    for column, options, key, label in ((left, proxies, "corr_mi", "MI proxy"),
                                        (right, entropies, "corr_entropy", "entropy")):
        with column:
            if not options:
                missing(f"mi/{sel.scope}/mi_est" if key == "corr_mi" else "update/entropy")
                continue
            picker = pick_mi if key == "corr_mi" else pick_entropy
            diagnostic = picker.selectbox(label, options, key=key)
            points = sel.labelled(_scatter(summary, diagnostic, target))
            st.altair_chart(charts.per_run_scatter(points, f"{diagnostic} vs final {target}",
                                                   diagnostic, f"final {target}",
                                                   sel.colours),
                            width="stretch")
    runs_with_target = summary.loc[summary["name"] == target, "run_id"].nunique()
    if runs_with_target < MIN_RUNS:
        st.info(f"The Spearman table needs at least {MIN_RUNS} runs with `{target}`; "
                f"{runs_with_target} selected.")
        return
    table = diagnostic_success_correlation(summary, target=target)
    if table.empty:
        st.info(f"No diagnostic varies across the selected runs together with `{target}`.")
        return
    st.caption(f"Spearman correlation with final `{target}` over the selected runs")
    st.dataframe(table, hide_index=True)

"""Which diagnostics predict a run's final success (PAPER.md finding 4).

Across a set of runs, the Spearman rank correlation between each diagnostic -- read at
one step, averaged over a step window, or at its last value -- and each run's final
value of a target metric (by default ``val/success``). The app and the flows call
:func:`diagnostic_success_correlation` on the store's metrics in long format.
"""

from __future__ import annotations

import math

import pandas as pd
from scipy.stats import spearmanr

METRIC_COLUMNS = ("run_id", "step", "name", "value")
RESULT_COLUMNS = ("diagnostic", "spearman", "p_value", "runs")
MIN_RUNS = 3


def diagnostic_success_correlation(metrics: pd.DataFrame, *, step: int | None = None,
                                   window: tuple[int, int] | None = None,
                                   target: str = "val/success") -> pd.DataFrame:
    """Spearman correlation of every diagnostic with each run's final ``target`` value.

    ``metrics``: long format, columns run_id, step, name, value (one row per logged
    number; repeated (run, step, name) rows are averaged). The target of a run is its
    value of ``target`` at the last step that has one. Each other metric name is a
    diagnostic, read per run at ``step`` exactly, or averaged over the inclusive
    ``window`` (first, last), or at its last logged step when both are None.

    Returns one row per diagnostic with columns diagnostic, spearman, p_value, runs
    (the number of runs that have both the diagnostic and the target), sorted by
    |spearman| descending. Diagnostics with fewer than 3 such runs or with a constant
    value across them are left out; so is everything when the target is constant.
    """
    missing = [column for column in METRIC_COLUMNS if column not in metrics.columns]
    if missing:
        raise ValueError(f"metrics lacks column(s) {missing}; expected {list(METRIC_COLUMNS)}")
    if step is not None and window is not None:
        raise ValueError("give step or window, not both")
    if window is not None and window[0] > window[1]:
        raise ValueError(f"window {window} is empty: its first step is after its last")

    frame = metrics.loc[:, list(METRIC_COLUMNS)].dropna(subset=["value"])
    frame = frame.groupby(["run_id", "name", "step"], as_index=False)["value"].mean()
    final = _final_values(frame[frame["name"] == target])
    diagnostics = _diagnostic_values(frame[frame["name"] != target], step, window)

    rows = []
    for name, per_run in diagnostics.groupby("name"):
        joined = per_run.set_index("run_id")["value"].to_frame("diagnostic").join(
            final.rename("target"), how="inner")
        if len(joined) < MIN_RUNS or joined["diagnostic"].nunique() < 2 \
                or joined["target"].nunique() < 2:
            continue
        rho, p_value = spearmanr(joined["diagnostic"], joined["target"])
        if math.isnan(rho):
            continue
        rows.append((name, float(rho), float(p_value), len(joined)))
    result = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    order = result["spearman"].abs().sort_values(ascending=False, kind="stable").index
    return result.loc[order].reset_index(drop=True)


def _final_values(target_rows: pd.DataFrame) -> pd.Series:
    """Each run's value at its last step that has one, indexed by run_id."""
    last = target_rows.sort_values("step").groupby("run_id").tail(1)
    return last.set_index("run_id")["value"]


def _diagnostic_values(rows: pd.DataFrame, step: int | None,
                       window: tuple[int, int] | None) -> pd.DataFrame:
    """One value per (name, run_id): at ``step``, the window mean, or the last one."""
    if step is not None:
        chosen = rows[rows["step"] == step]
        return chosen.loc[:, ["name", "run_id", "value"]]
    if window is not None:
        inside = rows[(rows["step"] >= window[0]) & (rows["step"] <= window[1])]
        return inside.groupby(["name", "run_id"], as_index=False)["value"].mean()
    last = rows.sort_values("step").groupby(["name", "run_id"]).tail(1)
    return last.loc[:, ["name", "run_id", "value"]]

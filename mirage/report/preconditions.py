"""The mechanism's preconditions per run (PAPER.md section 3, issue #43): template collapse
needs reward variance to fall, the regulariser to dominate the update where it is low, and
MI to fall before success does. Per run: the zero-variance and mixed shares of groups and
the mean and std over groups of the in-group reward variance, at the start and at the end;
the regulariser's share of the gradient per reward-variance bucket over the whole run
(where the decomposition was stored); and the first step at which reward variance, the
first-turn retrieval and success fell, by one sustained rule (the K-check rule of
mirage/report/sustained.py), with whether they fell in the paper's order."""

from __future__ import annotations

import math

import pandas as pd

from mirage.report import regime, sustained
from mirage.report.induced import MIXED, WINDOW, ZERO_VARIANCE
from mirage.report.names import RETRIEVAL
from mirage.report.results import VARIANCE_MEAN, VARIANCE_STD, Study

TRAIN_SUCCESS = "train/success"  # every step, on the rollouts reward variance is read from
GRAD_NORM = "update/grad_norm"  # before clipping: above max_grad_norm, clipping fixed the step's size
CLIPPED = "clipped updates"
BLOCK = 5  # steps per reading: the MI checks' cadence (diagnostics.every)
DROP = 0.2  # a reading below (1 - DROP) x the start's counts as fallen
ORDER = "RV before MI before success"
NOT_STORED = "not stored"
# The signals ordered, with the column that shows where each fell.
FELL = {"reward variance": "RV fell at", "retrieval": "retrieval fell at", "success": "success fell at"}


def rule() -> str:
    """The rules of the preconditions table in one sentence each, for its caption."""
    return (f"start and end are the means over a run's first {WINDOW} and last {WINDOW} training steps "
            f"(from step 1): the share of groups with zero reward variance, the share of mixed groups "
            f"(some trajectories won, some not), and the mean and the std over the step's groups (before "
            f"filtering) of the in-group reward variance RV(x); a signal **fell** at the first of "
            f"{sustained.K} consecutive readings below (1 - {DROP:g}) x its start (the sustained rule's K), "
            f"where the readings close every {BLOCK} steps (the MI checks' cadence): at step s, reward "
            f"variance (the step mean of RV) and success (the training batch's, every step, on the same "
            f"rollouts) are their means over steps s-{BLOCK - 1}..s and MI is the first-turn retrieval "
            f"accuracy of the check at s; the start is the first reading (steps 1-{BLOCK}: for MI the "
            f"mean of the checks at steps 1 and {BLOCK}); validation success, checked every 10 or 20 "
            f"steps, is too coarse to order; \"{ORDER}\" is yes when the three fell at strictly increasing steps, "
            f"n/a when one never fell; the regulariser's share is (||g_entropy|| + ||g_kl||) / (||g_task|| "
            f"+ ||g_entropy|| + ||g_kl||) per reward-std bucket q1 (lowest) .. q6 and all, averaged over "
            f"every gradient check of the run (bucket checks without a task gradient left out), "
            f"\"{NOT_STORED}\" where the run did not log the decomposition (it needs `grad` among "
            f"`diagnostics.names`; `diagnostics.options.grad.every: {BLOCK}` puts a check at every MI "
            f"check); {CLIPPED} is the share of the run's updates whose gradient norm before clipping "
            f"exceeded `algorithm.max_grad_norm` (there clipping, not the gradient, set the step's size)")


def readings(series: pd.DataFrame, per_step: bool) -> pd.Series:
    """One run's readings of a signal, indexed by the step each closes: ``series`` has
    columns step and value. Per-step signals are averaged over blocks of BLOCK steps
    (steps s-BLOCK+1..s for s = BLOCK, 2 BLOCK, ...); a checked signal (MI) is read at its
    checks at multiples of BLOCK, its checks at steps 1..BLOCK averaged into the first."""
    rows = series[series["step"] >= 1]
    if rows.empty:
        return pd.Series(dtype=float)
    closes = ((rows["step"] + BLOCK - 1) // BLOCK) * BLOCK
    if not per_step:
        rows = rows[(rows["step"] % BLOCK == 0) | (closes == BLOCK)]
        closes = closes[rows.index]
    return rows.groupby(closes)["value"].mean().sort_index()


def fell_at(values: pd.Series, k: int = sustained.K, drop: float = DROP) -> int | None:
    """The step of the first of ``k`` consecutive readings (after the first, the start)
    below (1 - ``drop``) x the start; None when there is none (or the start is not positive)."""
    if len(values) < 2 or not values.iloc[0] > 0:
        return None
    below = (values.iloc[1:] < (1 - drop) * values.iloc[0]).to_list()
    steps = values.index[1:].to_list()
    for i in range(len(below) - k + 1):
        if all(below[i:i + k]):
            return int(steps[i])
    return None


def order(onsets: dict[str, int | None]) -> str:
    """Whether reward variance fell before retrieval and retrieval before success."""
    never = [name for name, step in onsets.items() if step is None]
    if never:
        return "n/a (" + ", ".join(never) + " never fell)"
    steps = list(onsets.values())
    return "yes" if steps[0] < steps[1] < steps[2] else "no"


def _start_end(rows: pd.DataFrame, scale: float = 1.0) -> str:
    """'start -> end' of a per-step signal (means over the first and last WINDOW steps)."""
    rows = rows[rows["step"] >= 1].sort_values("step")
    if rows.empty:
        return "not measured"
    start, end = rows["value"].head(WINDOW).mean() / scale, rows["value"].tail(WINDOW).mean() / scale
    return f"{start:.2f} -> {end:.2f}"


def _shares(study: Study, run) -> str:
    """The regulariser's share per bucket over the run's gradient checks, one cell."""
    table = regime.gradient_shares(study, pd.DataFrame([{"run_id": run.run_id, "seed": run.seed}]), by=["seed"])
    if table is None:
        return NOT_STORED
    row = table.iloc[0]
    buckets = [b for b in regime.BUCKETS if b != "all" and b in row and not math.isnan(row[b])]
    if "all" in row and not math.isnan(row["all"]):
        buckets.append("all")
    checks = int(row["checks"])
    return (", ".join(f"{b} {row[b]:.2f}" for b in buckets)
            + f" ({checks} check{'s' if checks != 1 else ''}, steps {row['steps']})")


def preconditions(study: Study, run) -> dict:
    """One table row's worth for ``run`` (a row of ``study.runs``)."""
    rows = study.metrics[study.metrics["run_id"] == run.run_id]
    named = {name: rows[rows["name"] == name][["step", "value"]]
             for name in (ZERO_VARIANCE, MIXED, VARIANCE_MEAN, VARIANCE_STD, RETRIEVAL, TRAIN_SUCCESS)}
    onsets = {"reward variance": fell_at(readings(named[VARIANCE_MEAN], per_step=True)),
              "retrieval": fell_at(readings(named[RETRIEVAL], per_step=False)),
              "success": fell_at(readings(named[TRAIN_SUCCESS], per_step=True))}
    return {
        "zero-variance share": _start_end(named[ZERO_VARIANCE], float(run.prompts)),
        "mixed share": _start_end(named[MIXED]),
        "RV mean": _start_end(named[VARIANCE_MEAN]),
        "RV std": _start_end(named[VARIANCE_STD]),
        **{FELL[name]: "never" if step is None else step for name, step in onsets.items()},
        ORDER: order(onsets),
        "regulariser share of the gradient": _shares(study, run),
        CLIPPED: _clipped(rows[rows["name"] == GRAD_NORM]["value"], run.max_grad_norm),
    }


def _clipped(norms: pd.Series, limit: float) -> str:
    """The share of updates whose pre-clipping gradient norm exceeded ``limit``."""
    return NOT_STORED if norms.empty else f"{(norms > limit).mean():.2f} of {len(norms)}"


def caption() -> str:
    """The caption of every preconditions table (its rules are stated once, in the page's
    "How to read the verdicts": :func:`reading`)."""
    return ("The mechanism's preconditions per run (PAPER.md section 3: reward variance falls, the "
            "regulariser dominates the low-variance buckets, MI falls before success), read by the "
            "rules under \"How to read the verdicts\"")


def reading() -> str:
    """The preconditions tables' rules, for the page's "How to read the verdicts"."""
    return "Every **preconditions** table reads: " + rule() + "."


def preconditions_table(study: Study, runs: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """One row per run of ``runs`` (sorted by ``labels`` then seed, as the signature table
    beside it): its labels and preconditions."""
    ordered = runs.sort_values([*labels, "seed"])
    return pd.DataFrame([{label: getattr(run, label) for label in labels} | {"seed": run.seed}
                         | preconditions(study, run) for run in ordered.itertuples()])


def calibration_table(study: Study, experiment: str) -> pd.DataFrame:
    """The preconditions of every cell of a calibration sweep, in the order and with the
    setting columns of its signature table (mirage/report/regime.py's calibration_table)."""
    cells = study.of(experiment)
    varying = [key for key in regime.SETTINGS if cells.runs[key].nunique() > 1]
    table = preconditions_table(cells, cells.runs, varying)
    shown = {key: table[key].map(lambda v: f"{v:g}" if isinstance(v, float) else str(v) or "-") for key in varying}
    return table.assign(**shown).rename(columns={key: regime.SETTINGS[key] for key in varying})

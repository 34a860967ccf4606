"""The collapse regime in numbers: the calibration sweep that chose it (every cell it
tried), the paper's signature per run, and the regulariser's share of the gradient per
reward-variance bucket (PAPER.md sections 1 and 3)."""

from __future__ import annotations

import pandas as pd

from mirage.core.config.run_config import CollapseAlarmConfig
from mirage.report.findings import CHANCE, H_COND, RETRIEVAL, SUCCESS
from mirage.report.results import CALIBRATION, Study
from mirage.report.summary import endpoint

FORMAT = "mi/first_turn/format_valid"
BUCKETS = ["q1", "q2", "q3", "q4", "q5", "q6", "all"]
# The signature as the collapse alarm reads it: retrieval within this margin of chance
# while H(Z|X) stays at or above this multiple of its starting value.
MARGIN = CollapseAlarmConfig.model_fields["margin"].default
ENTROPY_RATIO = CollapseAlarmConfig.model_fields["entropy_ratio"].default
# Degeneration, as opposed to template collapse: most first-turn responses no longer parse.
DEGENERATE_FORMAT = 0.5


def _per_step(study: Study, run_id: str) -> pd.DataFrame:
    """The run's retrieval, chance, H(Z|X) and format validity, one row per MI check."""
    rows = study.metrics[(study.metrics["run_id"] == run_id)
                         & study.metrics["name"].isin([RETRIEVAL, CHANCE, H_COND, FORMAT])]
    return rows.pivot_table(index="step", columns="name", values="value").sort_index()


def signature(study: Study, run_id: str) -> dict:
    """When (if ever) the run showed the paper's signature, and how its reasoning ended:
    the first MI check where format validity fell below DEGENERATE_FORMAT (degeneration),
    the first with retrieval <= chance + MARGIN and H(Z|X) >= ENTROPY_RATIO x its step-0
    value, the format validity there, and the extremes over the run."""
    table = _per_step(study, run_id)
    if table.empty or H_COND not in table:
        return {"signature at": "not measured"}
    start = table[H_COND].iloc[0]
    hit = table[(table[RETRIEVAL] <= table[CHANCE] + MARGIN) & (table[H_COND] >= ENTROPY_RATIO * start)]
    step = int(hit.index[0]) if len(hit) else None
    broken = _first_degenerate(table)
    return {
        "degenerate from": "never" if broken is None else f"step {broken}",
        "signature at": "never" if step is None else f"step {step}",
        "format valid there": float(table.loc[step, FORMAT]) if step is not None and FORMAT in table else None,
        "lowest retrieval": float(table[RETRIEVAL].min()),
        "highest H(Z|X) / start": float(table[H_COND].max() / start) if start > 0 else None,
        "lowest format valid": float(table[FORMAT].min()) if FORMAT in table else None,
    }


def _first_degenerate(table: pd.DataFrame) -> int | None:
    """The first step of ``table`` with format validity below DEGENERATE_FORMAT, or None."""
    if FORMAT not in table:
        return None
    broken = table.index[table[FORMAT] < DEGENERATE_FORMAT]
    return int(broken[0]) if len(broken) else None


def degenerate_step(study: Study, run_id: str) -> float | None:
    """The first MI check at which the run had degenerated; a run that never did counts as
    one check interval past its last check (censored, so a delay is under-, not overstated).
    None when the run logged no format validity."""
    table = _per_step(study, run_id)
    if table.empty or FORMAT not in table:
        return None
    broken = _first_degenerate(table)
    if broken is not None:
        return float(broken)
    steps = table.index.to_list()
    return float(steps[-1] + (steps[-1] - steps[-2] if len(steps) > 1 else 0))


def calibration_table(study: Study) -> pd.DataFrame | None:
    """One row per calibration cell: its settings, its endpoints and its signature."""
    cells = study.of(CALIBRATION)
    if cells.runs.empty:
        return None
    ends = {name: endpoint(cells, name).set_index("run_id")["value"]
            for name in (RETRIEVAL, H_COND, FORMAT, SUCCESS)}
    rows = []
    for run in cells.runs.sort_values(["entropy_coef", "lr", "filter", "seed"]).itertuples():
        row = {"entropy coef": f"{run.entropy_coef:g}", "lr": f"{run.lr:g}", "filter": run.filter,
               "seed": run.seed, "steps": run.steps}
        for name, label in ((RETRIEVAL, "retrieval (end)"), (H_COND, "H(Z|X) (end)"),
                            (FORMAT, "format valid (end)"), (SUCCESS, "success t=0.5 (end)")):
            row[label] = ends[name].get(run.run_id, float("nan"))
        rows.append(row | signature(cells, run.run_id))
    return pd.DataFrame(rows)


def gradient_shares(study: Study, runs: pd.DataFrame) -> pd.DataFrame | None:
    """Per filter arm and reward-std bucket (q1 lowest), the entropy term's share of the
    task and entropy gradient norms, ||g_ent|| / (||g_task|| + ||g_ent||), averaged over the
    arm's runs and gradient checks; with the checks and runs it averages."""
    names = [f"grad/{b}/{term}/total" for b in BUCKETS for term in ("task", "entropy")]
    rows = study.metrics[study.metrics["name"].isin(names) & study.metrics["run_id"].isin(runs["run_id"])]
    if rows.empty:
        return None
    parts = rows["name"].str.split("/", expand=True)
    rows = rows.assign(bucket=parts[1], term=parts[2])
    wide = rows.pivot_table(index=["run_id", "step", "bucket"], columns="term", values="value").reset_index()
    wide = wide.dropna(subset=["task", "entropy"])
    total = wide["task"] + wide["entropy"]
    wide = wide[total > 0].assign(share=lambda w: w["entropy"] / (w["task"] + w["entropy"]))
    wide = wide.merge(runs[["run_id", "filter"]], on="run_id")
    table = wide.pivot_table(index="filter", columns="bucket", values="share", aggfunc="mean")
    table = table[[b for b in BUCKETS if b in table.columns]].reset_index()
    checks = wide.drop_duplicates(["run_id", "step"])
    counts = checks.groupby("filter").agg(checks=("step", "size"), runs=("run_id", "nunique")).reset_index()
    return table.merge(counts, on="filter")

"""The reasoning regime in the report: per run, the regimes it entered and when
(mirage/core/analysis/signature.py, the same rule `core show` and the app apply), the
calibration sweeps cell by cell, and the regulariser's share of the gradient per
reward-variance bucket at the checks before any run's format broke (PAPER.md section 3)."""

from __future__ import annotations

import pandas as pd

from mirage.core.analysis import signature as sig
from mirage.report.names import FORMAT, H_COND, RETRIEVAL, SUCCESS
from mirage.report.results import Study
from mirage.report.summary import endpoint

BUCKETS = ["q1", "q2", "q3", "q4", "q5", "q6", "all"]
# The run labels a calibration table may show; those equal in every cell are left out.
SETTINGS = {"env_options": "env options", "reference": "KL reference", "algorithm": "algorithm", "lr": "lr",
            "entropy_coef": "entropy coef", "kl_coef": "kl coef", "filter": "filter", "steps": "steps"}


def checks(study: Study, run_id: str) -> list[sig.RegimeCheck]:
    """The regime at each of the run's first-turn MI checks."""
    rows = study.metrics[(study.metrics["run_id"] == run_id) & study.metrics["name"].isin(sig.metric_names())]
    return sig.checks_from_rows(rows[["step", "name", "value"]].itertuples(index=False))


def signature(study: Study, run_id: str) -> dict:
    """One table row's worth: the regimes the run entered with the first step of each, the
    regime at its last check, when template collapse began (if ever) with the format
    validity there, and the extremes over the run."""
    found = checks(study, run_id)
    if not found:
        return {"regimes (first step)": "not measured"}
    entered = sig.first_entries(found)
    collapsed = entered.get(sig.TEMPLATE_COLLAPSE)
    return {
        "regimes (first step)": "; ".join(f"{regime} {step}" for regime, step in entered.items()),
        "last regime": found[-1].regime,
        "template collapse at": "never" if collapsed is None else f"step {collapsed}",
        "format valid there": (next(c.format_valid for c in found if c.step == collapsed)
                               if collapsed is not None else float("nan")),
        "lowest retrieval": min(c.retrieval for c in found),
        "highest H(Z|X) / start": max(c.h_ratio for c in found),
        "lowest format valid": min(c.format_valid for c in found),
    }


def signature_table(study: Study, runs: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """One row per run of ``runs`` (sorted by ``labels`` then seed): its labels and signature."""
    ordered = runs.sort_values([*labels, "seed"])
    return pd.DataFrame([{label: getattr(run, label) for label in labels} | {"seed": run.seed}
                         | signature(study, run.run_id) for run in ordered.itertuples()])


def count_regime(study: Study, runs: pd.DataFrame, regime: str) -> int:
    """How many of ``runs`` entered ``regime`` at some check."""
    return sum(regime in sig.first_entries(checks(study, run_id)) for run_id in runs["run_id"])


def count_modest_template_collapse(study: Study, runs: pd.DataFrame) -> int:
    """How many of ``runs`` had a template-collapse check with H(Z|X) at most
    ENTROPY_BLOWUP x its start: the count had degeneration's entropy rule come first."""
    return sum(any(c.regime == sig.TEMPLATE_COLLAPSE and c.h_ratio <= sig.ENTROPY_BLOWUP
                   for c in checks(study, run_id)) for run_id in runs["run_id"])


def degenerate_step(study: Study, run_id: str) -> float | None:
    """The first MI check at which the run was in the degeneration regime; a run that
    never was counts as one check interval past its last check (censored, so a delay is
    under-, not overstated). None when the run logged no MI checks."""
    found = checks(study, run_id)
    if not found:
        return None
    broken = [c.step for c in found if c.regime == sig.DEGENERATION]
    if broken:
        return float(broken[0])
    steps = [c.step for c in found]
    return float(steps[-1] + (steps[-1] - steps[-2] if len(steps) > 1 else 0))


def calibration_table(study: Study, experiment: str) -> pd.DataFrame | None:
    """One row per cell of a calibration sweep: the settings that vary between its cells,
    the seed, its endpoints and its signature (None when the results hold no such run)."""
    cells = study.of(experiment)
    if cells.runs.empty:
        return None
    varying = [key for key in SETTINGS if cells.runs[key].nunique() > 1]
    ends = {name: endpoint(cells, name).set_index("run_id")["value"]
            for name in (RETRIEVAL, H_COND, FORMAT, SUCCESS)}
    rows = []
    for run in cells.runs.sort_values([*varying, "seed"]).itertuples():
        row = {SETTINGS[key]: _shown(getattr(run, key)) for key in varying} | {"seed": run.seed}
        for name, label in ((RETRIEVAL, "retrieval (end)"), (H_COND, "H(Z|X) (end)"),
                            (FORMAT, "format valid (end)"), (SUCCESS, "success t=0.5 (end)")):
            row[label] = ends[name].get(run.run_id, float("nan"))
        rows.append(row | signature(cells, run.run_id))
    return pd.DataFrame(rows)


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else "-"


REGIME_LABELS = ["entropy_coef", "kl_coef", "reference", "env_options"]


def same_regime(candidates: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The ``candidates`` run with the regulariser, reference and environment options of
    one of ``runs`` (whatever their filter, algorithm or seed)."""
    keys = runs[REGIME_LABELS].drop_duplicates()
    return candidates.merge(keys, on=REGIME_LABELS)


def pre_collapse_shares(everything: Study, runs: pd.DataFrame, sources: list[tuple[str, str]]
                        ) -> list[tuple[str, pd.DataFrame]]:
    """For each (experiment, description) in ``sources``, the regulariser's share per arm
    (algorithm and filter) and bucket from its runs in the regime of ``runs``, at checks
    before any of them left the valid format, with the caption that says so."""
    shares = []
    for experiment, source in sources:
        study = everything.of(experiment)
        chosen = same_regime(study.runs, runs)
        if chosen.empty:
            continue
        until = valid_format_until(study, chosen)
        table = gradient_shares(study, chosen, by=["algorithm", "filter"], before=until)
        if table is None:
            continue
        limit = (f"before step {until}, where a run's format validity first fell below "
                 f"{sig.FORMAT_VALID:g}" if until is not None else "at every check (no run's format broke)")
        shares.append((
            "The regulariser's share of the gradient, (||g_entropy|| + ||g_kl||) / (||g_task|| + "
            "||g_entropy|| + ||g_kl||), per reward-std bucket (q1 lowest; all = the whole batch), "
            f"mean over runs and gradient checks {limit} (PAPER.md section 3), from {source}; a bucket's checks without a task "
            "gradient (no group in it with reward variance: share 1 by construction) are left out",
            table))
    return shares


def valid_format_until(study: Study, runs: pd.DataFrame) -> int | None:
    """The first step at which any of ``runs`` had fewer than FORMAT_VALID of its first
    turns parse (None when none ever did): checks before it are all in the valid format."""
    rows = study.metrics[(study.metrics["name"] == FORMAT) & study.metrics["run_id"].isin(runs["run_id"])]
    broken = rows[rows["value"] < sig.FORMAT_VALID]
    return int(broken["step"].min()) if len(broken) else None


def gradient_shares(study: Study, runs: pd.DataFrame, by: list[str] | None = None,
                    before: int | None = None) -> pd.DataFrame | None:
    """Per arm (``by`` labels, default the filter) and reward-std bucket (q1 lowest), the
    regulariser's share of the gradient norms, (||g_ent|| + ||g_kl||) / (||g_task|| +
    ||g_ent|| + ||g_kl||) (the KL norm is 0 without a KL term), averaged over the arm's
    runs and gradient checks at steps before ``before``; with the checks and runs it
    averages and the steps they span. A bucket's check whose task gradient is exactly 0
    (none of its groups has reward variance, so its share is 1 by construction) is left
    out: the share measures how the regulariser weighs against a task signal that exists."""
    by = by or ["filter"]
    names = [f"grad/{b}/{term}/total" for b in BUCKETS for term in ("task", "entropy", "kl")]
    rows = study.metrics[study.metrics["name"].isin(names) & study.metrics["run_id"].isin(runs["run_id"])]
    if before is not None:
        rows = rows[rows["step"] < before]
    if rows.empty:
        return None
    parts = rows["name"].str.split("/", expand=True)
    rows = rows.assign(bucket=parts[1], term=parts[2])
    wide = rows.pivot_table(index=["run_id", "step", "bucket"], columns="term", values="value").reset_index()
    wide = wide.dropna(subset=["task", "entropy"])
    regulariser = wide["entropy"] + (wide["kl"].fillna(0.0) if "kl" in wide else 0.0)
    wide = wide.assign(share=regulariser / (wide["task"] + regulariser))[wide["task"] > 0]
    wide = wide.merge(runs[["run_id", *by]], on="run_id")
    table = wide.pivot_table(index=by, columns="bucket", values="share", aggfunc="mean")
    table = table[[b for b in BUCKETS if b in table.columns]].reset_index()
    checks_ = wide.drop_duplicates(["run_id", "step"])
    counts = checks_.groupby(by).agg(checks=("step", "size"), runs=("run_id", "nunique"),
                                     first=("step", "min"), last=("step", "max")).reset_index()
    counts["steps"] = counts["first"].astype(str) + "-" + counts["last"].astype(str)
    return table.merge(counts.drop(columns=["first", "last"]), on=by)


def first_turn_samples(study: Study, run_id: str, step: int, per_prompt: int = 2) -> pd.DataFrame | None:
    """The run's stored first-turn samples at ``step``: up to ``per_prompt`` per prompt,
    their reasoning and action (None when the results hold no rollouts for it)."""
    if study.rollouts is None:
        return None
    rows = study.rollouts[(study.rollouts["run_id"] == run_id) & (study.rollouts["step"] == step)
                          & (study.rollouts["turn"] == 0)]
    if rows.empty:
        return None
    rows = rows.sort_values(["prompt_index", "sample_index"]).groupby("prompt_index").head(per_prompt)
    return rows[["prompt_index", "sample_index", "reasoning", "action"]].rename(
        columns={"prompt_index": "prompt", "sample_index": "sample"}).reset_index(drop=True)


def collapsed_samples(study: Study, runs: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """For each of ``runs`` that reached template collapse, its stored first-turn samples at
    the first check in that regime, captioned with the run and the readings there."""
    shown = []
    for run in runs.sort_values(["filter", "seed"]).itertuples():
        found = [c for c in checks(study, run.run_id) if c.regime == sig.TEMPLATE_COLLAPSE]
        if not found:
            continue
        check = found[0]
        samples = first_turn_samples(study, run.run_id, check.step)
        if samples is None:
            continue
        shown.append((f"{run.filter}, seed {run.seed}, step {check.step} (template collapse: retrieval "
                      f"{check.retrieval:.3f} at chance {check.chance:.3f}, H(Z|X) {check.h_ratio:.2f} x "
                      f"its start, format validity {check.format_valid:.2f}): stored first-turn samples "
                      "(up to two per prompt)", samples))
    return shown

"""The collapse study's section: runs of the registry experiment ``collapse`` (no filter
against top-p, seeds paired), their curves over training per seed and a paired table of
endpoint differences. Until such runs are exported the section is one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mirage.report import figures, regime
from mirage.report.figures import TITLES
from mirage.report.findings import CHANCE, H_COND, RETRIEVAL, SUCCESS, Finding
from mirage.report.paired import paired
from mirage.report.results import COLLAPSE, Study
from mirage.report.summary import by_seed, endpoint, markdown_table
from mirage.report.verdicts import Check

KEY = "collapse study"
TITLE = f"The collapse study (experiment `{COLLAPSE}`)"
ABSENT = (f"The results hold no run of the registry experiment `{COLLAPSE}` yet; this section "
          "fills in once its runs are exported with `core report --from-store`.")
CURVES = [RETRIEVAL, H_COND, regime.FORMAT, SUCCESS]  # one panel row each; chance is drawn with retrieval


def collapse_study(study: Study, figure_dir: Path) -> Finding | None:
    """The section for ``study``'s runs of experiment ``collapse``; None when it has none."""
    calibration, study = study.of(regime.CALIBRATION), study.of(COLLAPSE)
    runs = study.runs[(study.runs["filter"] == "none") | study.runs["filter"].str.startswith("top-p")]
    if runs.empty:
        return None
    finding = Finding(KEY, TITLE,
                      "Reward-variance filtering is the remedy for template collapse: with top-p "
                      "the reasoning keeps depending on the input (first-turn retrieval accuracy "
                      "stays above chance) and success is higher than without a filter (PAPER.md "
                      "sections 1 and 4, finding 5).")
    values = {name: endpoint(study, name) for name in (RETRIEVAL, CHANCE, H_COND, SUCCESS)}
    rows = []
    for (env, flt, seed), _ in runs.groupby(["env", "filter", "seed"], sort=True):
        row = {"env": env, "filter": flt, "seed": seed}
        for name in (RETRIEVAL, CHANCE, H_COND, SUCCESS):
            part = values[name]
            chosen = part[(part["env"] == env) & (part["filter"] == flt) & (part["seed"] == seed)
                          & part["run_id"].isin(runs["run_id"])]
            row[TITLES.get(name, name)] = chosen["value"].mean() if len(chosen) else float("nan")
        rows.append(row)
    for env, env_runs in runs.groupby("env", sort=True):
        for flt in sorted(f for f in env_runs["filter"].unique() if f != "none"):
            arms = {}
            for name in (RETRIEVAL, H_COND, SUCCESS):
                part = values[name][values[name]["run_id"].isin(env_runs["run_id"])]
                arms[name] = paired(by_seed(part[part["filter"] == flt]), by_seed(part[part["filter"] == "none"]))
            finding.checks.append(Check(f"{env}: retrieval acc. {flt} - none", arms[RETRIEVAL], 1))
            finding.checks.append(Check(f"{env}: success {flt} - none", arms[SUCCESS], 1))
            onset = {arm: {run.seed: regime.degenerate_step(study, run.run_id)
                           for run in env_runs[env_runs["filter"] == arm].itertuples()}
                     for arm in (flt, "none")}
            if all(value is not None for arm in onset.values() for value in arm.values()):
                finding.checks.append(Check(
                    f"{env}: iteration of degeneration {flt} - none (never: last check + 5)",
                    paired(onset[flt], onset["none"]), 1))
            h = arms[H_COND]
            finding.evidence.append(
                f"{env}: H(Z|X) {flt} - none {h.mean:+.3f}"
                + ("" if h.too_few else f" [{h.low:+.3f}, {h.high:+.3f}]")
                + " (no direction predicted: the paper reads collapse in I(X;Z), not in H(Z|X)).")
    finding.conclude()
    finding.tables.insert(0, ("Endpoints per seed", markdown_table(pd.DataFrame(rows))))
    signatures = pd.DataFrame([{"filter": run.filter, "seed": run.seed} | regime.signature(study, run.run_id)
                               for run in runs.sort_values(["filter", "seed"]).itertuples()])
    finding.tables.append((
        f"Per run: the first check where fewer than {regime.DEGENERATE_FORMAT:g} of first-turn "
        "responses parse (degeneration); the paper's signature, the first check with retrieval "
        f"within {regime.MARGIN:g} of chance while H(Z|X) is at least {regime.ENTROPY_RATIO:g} x "
        "its start, and the format validity there; the extremes over the run",
        markdown_table(signatures)))
    # The study leaves the gradient decomposition to the calibration runs of its regime
    # (same settings, one seed), when the study's own runs did not record it.
    shares = regime.gradient_shares(study, runs)
    source = "the study's runs"
    if shares is None:
        same = calibration.runs[calibration.runs["entropy_coef"].isin(runs["entropy_coef"].unique())]
        shares, source = regime.gradient_shares(calibration, same), "the calibration runs of this regime"
    if shares is not None:
        finding.tables.append((
            "The regulariser's share of the gradient, ||g_entropy|| / (||g_task|| + ||g_entropy||), "
            "per reward-std bucket (q1 lowest; all = the whole batch), mean over runs and gradient "
            f"checks (PAPER.md section 3), from {source}", markdown_table(shares)))
    finding.figure = figures.seed_curves(study, runs, CURVES, figure_dir / "collapse_study_curves.png",
                                         chance=CHANCE)
    return finding

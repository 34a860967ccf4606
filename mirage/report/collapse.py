"""The section of the registry experiment ``collapse`` (no filter against top-p, seeds
paired): what it provoked was degeneration (the reasoning stops parsing), not template
collapse, and the section is named for that. Its curves per seed, a paired table of
endpoint differences and of the iteration of degeneration, each run's regime signature,
and the regulariser's share of the gradient per reward-variance bucket at checks before
any run's format broke. Until such runs are exported the section is one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mirage.core.analysis import signature as sig
from mirage.report import figures, preconditions, regime
from mirage.report.figures import TITLES
from mirage.report.findings import Finding
from mirage.report.names import CHANCE, H_COND, RETRIEVAL, SUCCESS
from mirage.report.paired import paired
from mirage.report.results import CALIBRATION, COLLAPSE, GRADIENTS, Study
from mirage.report.summary import by_seed, endpoint, markdown_table
from mirage.report.verdicts import Check

KEY = "collapse study"
TITLE = f"Delayed degeneration, not template collapse (experiment `{COLLAPSE}`)"
ABSENT = (f"The results hold no run of the registry experiment `{COLLAPSE}` yet; this section "
          "fills in once its runs are exported with `core report --from-store`.")
CURVES = [RETRIEVAL, H_COND, regime.FORMAT, SUCCESS]  # one panel row each; chance is drawn with retrieval


def collapse_study(study: Study, figure_dir: Path) -> Finding | None:
    """The section for ``study``'s runs of experiment ``collapse``; None when it has none."""
    everything, study = study, study.of(COLLAPSE)
    runs = study.runs[(study.runs["filter"] == "none") | study.runs["filter"].str.startswith("top-p")]
    if runs.empty:
        return None
    unfiltered = runs[runs["filter"] == "none"]
    finding = Finding(KEY, TITLE,
                      "Reward-variance filtering is the remedy for template collapse: with top-p "
                      "the reasoning keeps depending on the input (first-turn retrieval accuracy "
                      "stays above chance) and success is higher than without a filter (PAPER.md "
                      "sections 1 and 4, finding 5). This experiment was meant to provoke template "
                      "collapse; what it provoked is degeneration (its signature table below, by the sustained "
                      f"rule: {regime.count_regime(study, unfiltered, sig.DEGENERATION)} of {len(unfiltered)} "
                      "unfiltered runs end degenerate, "
                      f"{regime.count_regime(study, unfiltered, sig.TEMPLATE_COLLAPSE)} in the "
                      "template-collapse signature), so its checks test whether top-p delays the "
                      "degeneration, not the paper's claim.")
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
                    f"{env}: iteration of sustained degeneration {flt} - none (never: one check "
                    "interval past the last)",
                    paired(onset[flt], onset["none"]), 1))
            h = arms[H_COND]
            finding.evidence.append(
                f"{env}: H(Z|X) {flt} - none {h.mean:+.3f}"
                + ("" if h.too_few else f" [{h.low:+.3f}, {h.high:+.3f}]")
                + " (no direction predicted: the paper reads collapse in I(X;Z), not in H(Z|X)).")
    if (noise := regime.noise_sentence(study, unfiltered, "unfiltered seeds")):
        finding.evidence.append(noise + ".")
    finding.conclude(COLLAPSE)
    finding.tables.insert(0, ("Endpoints per seed", markdown_table(pd.DataFrame(rows))))
    finding.tables.append((regime.signature_caption(),
                           markdown_table(regime.signature_table(study, runs, ["filter"]))))
    finding.tables.append((preconditions.caption(),
                           markdown_table(preconditions.preconditions_table(study, runs, ["filter"]))))
    sources = [(CALIBRATION, f"the calibration runs of this regime (`{CALIBRATION}`)"),
               (GRADIENTS, regime.gradients_source(everything))]
    for caption, shares in regime.pre_collapse_shares(everything, runs, sources):
        finding.tables.append((caption, markdown_table(shares)))
    finding.figure = figures.seed_curves(study, runs, CURVES, figure_dir / "collapse_study_curves.png",
                                         chance=CHANCE)
    return finding

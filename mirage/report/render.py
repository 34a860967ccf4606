"""docs/reproduction.md from an exported study: for each finding the paper's claim, the
measured tables and figure, the computed verdict and the researcher's reading of it
(``notes``: finding key -> text, kept in a YAML file beside the results), how the
verdicts are read, and the collapse study's section when its runs are present."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import yaml

from mirage.core.analysis import signature as sig
from mirage.report import (collapse, conventions, induced, mechanism, preconditions, regime, sustained, template,
                           visual)
from mirage.report.findings import (FINDINGS, Finding, adjust_families, provoked_collapse,
                                    spearman_on_both_scales)
from mirage.report.names import SUCCESS
from mirage.report.paired import CONFIDENCE, POWER, detectable_factor, sd_range
from mirage.report.results import (CALIBRATION, GRADIENTS, MECHANISM, MECHANISM_CALIBRATION, POWERED,
                                   STUDY, TEMPLATE_CALIBRATION, TEMPLATE_CALIBRATION_KL,
                                   TEMPLATE_CALIBRATION_LR, Study, findings_experiment, read_with_visual)
from mirage.report.summary import LAST_CHECKS, markdown_table
from mirage.report.verdicts import ALPHA, GATE_FAILED, GATE_PENDING


def build_report(results: Path, out: Path, figure_dir: Path, notes: Path | None = None) -> list[Finding]:
    """Render the report for the exported study in ``results`` to ``out`` with its
    figures in ``figure_dir``; return the findings (the collapse study's last, when present)."""
    everything = read_with_visual(results)
    name = findings_experiment(everything.runs)
    study = everything.of(name)
    findings = ([_measured(measure, study, everything, figure_dir) for measure in FINDINGS]
                if len(study.runs) else [])
    collapse_finding = collapse.collapse_study(everything, figure_dir)
    later = (([collapse_finding] if collapse_finding else []) + template.template_study(everything, figure_dir)
             + visual.visual_study(everything) + mechanism.mechanism_study(everything, figure_dir)
             + (both_scales := spearman_on_both_scales(everything, (MECHANISM, MECHANISM_CALIBRATION),
                                                        figure_dir)))
    adjust_families(findings + later)  # one Holm family per registry experiment
    readings = yaml.safe_load(notes.read_text()) if notes and notes.exists() else {}
    readings = {str(key): text for key, text in (readings or {}).items()}
    design = _design(results, study, name) if len(study.runs) else f"The results hold no run of `{STUDY}`."
    out.parent.mkdir(parents=True, exist_ok=True)
    introduction = _introduction(everything, name, design)
    for line in _top_lines(everything):
        introduction += "\n\n" + line
    if len(study.runs):
        configs = pd.read_parquet(results / "runs.parquet", columns=["run_id", "config"])
        configs = configs[configs["run_id"].isin(study.runs["run_id"])]["config"]
        introduction += "\n\n" + conventions.scale_statement(
            study, configs, name, [finding.experiment for finding in both_scales])
    text = _markdown(findings, later, readings, introduction, name,
                     _reading(study, everything), out, figure_dir, everything)
    out.write_text(text + _regimes(everything, name) + _calibrations(everything, readings))
    return findings + later


def _measured(measure, study: Study, everything: Study, figure_dir: Path) -> Finding:
    """``measure`` on ``study``; the provoked regime, which the powered study leaves to the
    collapse study, on the first study's runs when only they have it (so every regime tried
    stays reported)."""
    if measure is not provoked_collapse or (study.runs["regime"] == "provoked").any():
        return measure(study, figure_dir)
    earlier = everything.of(STUDY)
    if (earlier.runs["regime"] == "provoked").any():
        finding = measure(earlier, figure_dir)
        finding.evidence.insert(0, f"Measured on the first study, `{STUDY}` ({_plan(earlier)}, the "
                                   "previous demonstrations); "
                                   f"`{POWERED}` leaves this regime to the collapse study below.")
        return finding
    return measure(study, figure_dir)


CALIBRATIONS = {  # experiment -> its section's title
    CALIBRATION: f"Finding the collapse regime (experiment `{CALIBRATION}`)",
    TEMPLATE_CALIBRATION: f"Looking for template collapse (experiment `{TEMPLATE_CALIBRATION}`)",
    TEMPLATE_CALIBRATION_LR: ("Looking for template collapse: lr {lr} (experiment "
                              f"`{TEMPLATE_CALIBRATION_LR}`)"),
    TEMPLATE_CALIBRATION_KL: ("Looking for template collapse: the templated reference pulled harder "
                              f"(experiment `{TEMPLATE_CALIBRATION_KL}`)"),
    MECHANISM_CALIBRATION: ("Looking for the paper's causal chain on pictures, with no templated anchor "
                            f"(experiment `{MECHANISM_CALIBRATION}`)"),
}


def _regimes(everything: Study, name: str) -> str:
    """The findings' study run by run: the reasoning regimes each run entered."""
    study = everything.of(name)
    if study.runs.empty:
        return ""
    labels = ["env", "filter", "slip", "regime"]
    table = regime.signature_table(study, study.runs, labels)
    return "\n".join(["", f"## Reasoning regime per run (experiment `{name}`)", "",
                      f"Every run the findings above are measured on. {regime.signature_caption()}.", "",
                      markdown_table(table), "", f"*{preconditions.caption()}.*", "",
                      markdown_table(preconditions.preconditions_table(study, study.runs, labels)), ""])


def _calibrations(study: Study, readings: dict) -> str:
    """Each calibration sweep's section: every cell it ran, with the reading of it."""
    lines = []
    for experiment, title in CALIBRATIONS.items():
        table = regime.calibration_table(study, experiment)
        if table is None:
            continue
        lr = " or ".join(f"{value:g}" for value in sorted(study.of(experiment).runs["lr"].unique()))
        lines += ["", f"## {title.replace('{lr}', lr)}", "",
                  "Every cell the sweep ran, all from one warm start: the settings that differ "
                  "between its cells, the endpoints (mean of the last checks), then "
                  f"{regime.signature_caption()[0].lower() + regime.signature_caption()[1:]}.", "",
                  markdown_table(table), "", f"*{preconditions.caption()}.*", "",
                  markdown_table(preconditions.calibration_table(study, experiment)), ""]
        if experiment in readings:
            lines += [readings[experiment].strip(), ""]
    return "\n".join(lines)


def _plan(study: Study) -> str:
    """'5 seeds, 60 iterations, 256 validation episodes' from ``study``'s run labels."""
    runs = study.runs
    if runs.empty:
        return "no runs"

    def values(column: str) -> str:
        return " or ".join(str(v) for v in sorted(runs[column].unique()))

    return (f"{runs['seed'].nunique()} seeds, {values('steps')} iterations, "
            f"{values('validation_episodes')} validation episodes")


def _top_lines(everything: Study) -> list[str]:
    """The page's top lines: for each study that provokes a regime, how it was induced,
    where its unfiltered seeds end by the sustained rule, and whether reward variance fell."""
    lines = []
    earlier = everything.of(STUDY)
    provoked = earlier.runs[(earlier.runs["regime"] == "provoked") & (earlier.runs["filter"] == "none")]
    sources = [(f"`{STUDY}`'s provoked regime", earlier, provoked)]
    study = everything.of(collapse.COLLAPSE)
    sources.append((f"`{collapse.COLLAPSE}`", study, study.runs[study.runs["filter"] == "none"]))
    for label, source, unfiltered in sources:
        if unfiltered.empty:
            continue
        regimes = pd.Series([end.regime for run_id in unfiltered["run_id"]
                             if (end := regime.endpoint_regime(source, run_id)) is not None])
        counts = ", ".join(f"{count} in {name}" for name, count in regimes.value_counts().sort_index().items())
        variance, _ = induced.reward_variance(source, unfiltered)
        lines.append(f"In {label} (induced by {induced.induced_by(unfiltered)}), the {len(unfiltered)} "
                     f"unfiltered seeds end, by the sustained rule (the mean of their last {sustained.K} "
                     f"MI checks), {counts}" + (f"; {variance}" if variance else "") + ".")
    for headline in (template.headline, mechanism.headline):
        if (line := headline(everything)):
            lines.append(line)
    return lines


def _reading(study: Study, everything: Study) -> str:
    """The "How to read the verdicts" paragraph, with the study's seed count, the detectable
    difference's factor at it and the number of validation checks its endpoints average;
    the families, the gates and the sustained rule for regimes, with one check's noise."""
    seeds = study.runs.groupby(["experiment", "env", "filter", "slip", "regime"]).size()
    n = int(seeds.min()) if len(seeds) else 0
    validation = study.metrics[(study.metrics["name"] == SUCCESS) & (study.metrics["step"] >= 1)]
    checks = int(validation.groupby("run_id")["step"].nunique().min()) if len(validation) else 0
    level, alpha = f"{CONFIDENCE:.0%}", f"{ALPHA:g}"
    upper, lower = f"{(1 + CONFIDENCE) / 2:g}", f"{(1 - CONFIDENCE) / 2:.3g}"
    factor = ""
    if n >= 2:
        sd_low, sd_high = sd_range(n)
        exact = detectable_factor(n)
        factor = (f" With {n} seeds the factor is {exact:.2f} and the sd's interval is "
                  f"{sd_low:.2f}-{sd_high:.2f} x the estimate, so the detectable difference "
                  f"ranges over {exact * sd_low:.2f}-{exact * sd_high:.2f} x the estimated sd.")
    return (
        "Each finding is a set of directional checks (listed under it). A check compares two "
        "arms run with the same seeds (or a run's warm start with its endpoint), **paired by "
        "seed**: the per-seed differences give n, their mean and sd, the "
        f"{level} t interval mean +- t_{{{upper}, n-1}} sd / sqrt(n), the two-sided paired "
        "t-test p and the standardised effect d_z = mean / sd. Correlation checks use "
        "Spearman's rho over runs, its p and the Fisher-z interval "
        f"tanh(atanh(rho) +- z_{{{upper}}} sqrt(1.06 / (n - 3))). **Multiplicity**: one Holm "
        "family per registry experiment: the p values of every check measured on one "
        "experiment's runs, across all of its findings and sections, paired and correlation "
        "alike, are adjusted together by Holm's step-down method (the i-th smallest of m times "
        "m - i + 1, kept non-decreasing, capped at 1); each checks table shows the raw p and "
        "the adjusted \"p (Holm)\" and names its family and its size. A check **holds** when its interval excludes 0 on the predicted side "
        f"and its Holm p is below {alpha}, is **contradicted** when its interval excludes 0 on "
        f"the other side and its Holm p is below {alpha}, and is **not detected** otherwise "
        "(an interval that excludes 0 is not enough once the family is accounted for); with "
        "fewer than 2 seeds it has **too few seeds**. Column "
        f"\"detectable ({POWER:.0%})\" is the smallest true difference that a two-sided paired "
        f"t-test at alpha = {alpha} finds with {POWER:.0%} power: the factor d with power "
        f"{POWER:.0%} under the noncentral t distribution (n - 1 degrees of freedom, "
        "noncentrality d sqrt(n), both tails counted), times the sd; it is stated before "
        "Holm's adjustment, which only raises it. An sd from few seeds is itself uncertain, so "
        "the range in parentheses is the detectable difference over the sd's "
        f"{level} chi-square interval, sd sqrt((n-1) / chi2_{{{upper}, n-1}}) to "
        f"sd sqrt((n-1) / chi2_{{{lower}, n-1}}): a \"not detected\" says little about "
        f"true differences below it.{factor} A finding holds when all of its checks hold, "
        "holds partly when some do, is contradicted when none holds and one is contradicted, "
        "and is not detected otherwise. A study whose claim needs a regime has a **gate**: "
        f"`{template.TEMPLATE}` tests PAPER.md's remedy only when at least {template.GATE} of 5 "
        f"unfiltered seeds end in template collapse by the sustained rule below, and `{mechanism.MECHANISM}` "
        "only when, besides, reward variance fell without a filter (the paper's premise); when a gate "
        f"fails, its sections' verdict is \"{GATE_FAILED}\", whatever their checks show, and while its "
        f"study runs and the gate can still pass, \"{GATE_PENDING}\". A run's "
        "**endpoint** for validation success and for "
        f"the MI proxies and entropy is the mean of its last K = {LAST_CHECKS} checks after "
        f"the warm start, fewer when it has fewer (validation success here has {checks} per run). "
        f"A run's **reasoning regime** is read from a sustained signal, in every section: "
        f"{sustained.rule()} (docs/diagnostics.md's rule: {sig.rule()}). One check never "
        f"decides a regime: its first-turn retrieval accuracy is a share of n = P x G samples, "
        f"with binomial sd sqrt(p(1-p)/n){_noise(everything)}. " + preconditions.reading())


def _noise(everything: Study) -> str:
    """One check's retrieval noise at the template study's unfiltered endpoint, if run."""
    study = everything.of(template.TEMPLATE)
    if study.runs.empty:
        return ""
    unfiltered = template.unfiltered_runs(study)
    ends = [end.retrieval for run_id in unfiltered["run_id"]
            if (end := regime.endpoint_regime(study, run_id)) is not None]
    if not ends:
        return ""
    samples = int((unfiltered["prompts"] * unfiltered["group_size"]).min())
    p = sum(ends) / len(ends)
    return (f"; in `{template.TEMPLATE}`, at its unfiltered seeds' mean endpoint retrieval, "
            + sustained.noise(p, samples))


def _design(results: Path, study, name: str) -> str:
    runs = pd.read_parquet(results / "runs.parquet")
    runs = runs[runs["experiment"] == name]
    minutes = (runs["finished_at"] - runs["created_at"]).dt.total_seconds().sum() / 60
    wall = (runs["finished_at"].max() - runs["created_at"].min()).total_seconds() / 60
    configurations = len(study.runs.drop_duplicates(["env", "filter", "slip", "regime"]))
    config = json.loads(runs["config"].iloc[0])
    steps = " or ".join(str(s) for s in sorted(study.runs["steps"].unique()))
    seeds = ", ".join(str(s) for s in sorted(study.runs["seed"].unique()))
    commits = ", ".join(sorted({str(c)[:7] for c in runs["git_commit"].dropna()})) or "unknown"
    return (f"{len(runs)} runs: {configurations} configurations x seeds {seeds}; {steps} "
            f"iterations of P x G = {config['rollout']['prompts']} x {config['rollout']['group_size']}; "
            f"validation on {config['validation']['episodes']} fixed episodes every "
            f"{config['validation']['every']} iterations. Compute: {minutes:.0f} run-minutes "
            f"({wall:.0f} minutes of wall time from the first run's start to the last one's end; "
            f"{config['threads']} torch thread(s) per run). Code at commit {commits}.")


def _introduction(everything: Study, name: str, design: str) -> str:
    """Which experiment the findings below measure, and its design."""
    if name == POWERED:
        return ("The registry experiment `reproduction_powered` (registry.yaml) re-measures "
                "PAPER.md's central findings with the tiny warm-started policy on this CPU "
                f"machine, with the power the first study (`{STUDY}`: {_plan(everything.of(STUDY))}) "
                f"lacked: {_plan(everything.of(POWERED))}, seeds paired, and equal optimizer steps in "
                "every arm; the findings below are measured on it alone. " + design)
    return ("The registry experiment `reproduction` (registry.yaml) re-measures PAPER.md's central "
            "findings with the tiny warm-started policy on this CPU machine. " + design)


def _markdown(findings: list[Finding], later: list[Finding], readings: dict, introduction: str,
              name: str, reading: str, out: Path, figure_dir: Path, everything: Study) -> str:
    figure_link = Path(os.path.relpath(figure_dir, out.parent))
    lines = [
        "# Reproducing the paper's findings at CPU scale",
        "",
        "<!-- Generated by `core report` from results/reproduction/ and "
        "results/reproduction.notes.yaml; edit those, not this file. -->",
        "",
        introduction,
        "",
        "Later experiments close the page. `collapse_calibration` searched for a regime where "
        "the paper's mechanism acts and `collapse` studied the one it chose (paired: "
        f"{_plan(everything.of(collapse.COLLAPSE))}, equal optimizer steps per iteration in both arms); "
        "what that regime provoked is degeneration, not template collapse, and its section is "
        f"named for it. `{TEMPLATE_CALIBRATION}`, `{TEMPLATE_CALIBRATION_LR}`, "
        f"`{TEMPLATE_CALIBRATION_KL}` and `{GRADIENTS}` searched again, with every regime tried "
        "listed, and `template_collapse` is the paired study with its controls. `visual` runs the "
        "paper's visual rows. `mechanism_calibration` looked again, on pictures and with no templated "
        "anchor, for a regime where reward variance falls and the paper's causal chain can act, and "
        "`mechanism` is the paired study of the regime it chose, with its controls. Every run's "
        "reasoning regime is read by one rule, stated in each table's caption "
        "(docs/diagnostics.md). They use the state-describing demonstrations (Sokoban "
        "version 3, FrozenLake version 4, docs/warm-start.md) and exact group statistics "
        "(docs/diagnostics.md)"
        + (f", as `{POWERED}` does; the first study, `{STUDY}`, predates them (the previous "
           "demonstrations, veRL's float32 group estimator, unequal optimizer steps)."
           if name == POWERED else
           f"; the `{STUDY}` runs predate both (the previous demonstrations, veRL's float32 "
           "group estimator, unequal optimizer steps)."),
        "",
        "Regenerate this page (tables, figures, verdicts) from the committed results: "
        "`core report`. Re-run the study (it resumes: finished cells are reused): "
        f"`core sweep {name} --width 2 --db runs/{name}.duckdb` (likewise "
        "`collapse_calibration` and `collapse`), then `core report --from-store STORE` with "
        "one `--from-store` per store. Browse the runs in the app: "
        "`core report --restore runs/study.duckdb && core app --db runs/study.duckdb`.",
        "",
        "## How to read the verdicts",
        "",
        reading,
        "",
        "## Verdicts",
        "",
        markdown_table(pd.DataFrame([{"finding": f.key, "what": f.title, "verdict": f.verdict}
                                     for f in findings + later],
                                    columns=["finding", "what", "verdict"])),
        "",
    ]
    for finding in findings + later:
        lines += [f"## Finding {finding.key}: {finding.title}" if finding.key[0].isdigit()
                  else f"## {finding.title}", "",
                  f"**Paper.** {finding.claim}", ""]
        if finding.figure:
            lines += [f"![{finding.title}]({figure_link / finding.figure})", ""]
        for caption, table in finding.tables:
            lines += [f"*{caption}.*", "", table, ""]
        lines += ["**Measured.** " + " ".join(finding.evidence), "",
                  f"**Verdict: {finding.verdict}.**"
                  + (f" {readings[finding.key].strip()}" if finding.key in readings else ""), ""]
    keys = {finding.key for finding in later}
    if collapse.KEY not in keys:
        lines += [f"## {collapse.TITLE}", "", collapse.ABSENT, ""]
    if template.KEY not in keys:
        lines += [f"## {template.TITLE}", "", template.ABSENT, ""]
    if mechanism.KEY not in keys:
        lines += [f"## {mechanism.TITLE}", "", mechanism.ABSENT, ""]
    return "\n".join(lines)

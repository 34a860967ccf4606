"""Each of the paper's findings the study re-measures: its claim, the measured table, a
figure and a verdict computed from the numbers by a stated rule (PAPER.md section 5).

Every finding is a set of directional checks; each check is a paired comparison across
seeds (or a rank correlation over runs) whose 95% interval and p value, Holm-adjusted over
every check of its registry experiment (one family per experiment), give its verdict
(mirage/report/verdicts.py), and the finding's verdict follows from its checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from mirage.report import conventions, figures, preconditions, regime
from mirage.report.names import CHANCE, ENTROPY, GREEDY, H_COND, LENGTH, RETRIEVAL, SUCCESS
from mirage.report.paired import paired, spearman_interval
from mirage.report.results import Study
from mirage.report.summary import (by_seed, change, endpoint, markdown_table, mean_and_range,
                                   mean_with_spread, over_seeds, seed_range, window_mean)
from mirage.report.verdicts import (NOT_DETECTED, Check, check_row, check_sentence, finding_verdict,
                                    holm_adjusted)


MAIN_FILTERS = ["none", "top-k 0.5", "top-p 0.9"]


@dataclass
class Finding:
    key: str
    title: str
    claim: str
    verdict: str = NOT_DETECTED
    evidence: list[str] = field(default_factory=list)
    tables: list[tuple[str, str]] = field(default_factory=list)
    figure: str | None = None
    checks: list[Check] = field(default_factory=list)
    experiment: str = ""  # the registry experiment its checks are measured on: their Holm family
    gate: str | None = None  # a failed (or pending) gate's reason: the finding then has no verdict
    gate_pending: bool = False  # the gate has not passed yet, but its study runs and it still can
    _sentences: list[str] = field(default_factory=list, repr=False)
    _table: tuple[str, str] | None = field(default=None, repr=False)

    def conclude(self, experiment: str = "") -> None:
        """Verdict, evidence sentences and the paired-checks table from ``checks``, their p
        values Holm-adjusted with the finding's own checks as the family; the report then
        re-adjusts them over their experiment's family (:func:`adjust_families`). The
        sentences and the table go where the evidence and the tables end now."""
        self.experiment = experiment or self.experiment
        self.judge(holm_adjusted(self.checks), f"this finding's {len(self.checks)} checks")

    def judge(self, checks: list[Check], family: str) -> None:
        """Set ``checks`` (already Holm-adjusted over ``family``, described for the
        caption) and redraw the verdict, the sentences and the table in their places."""
        self.checks = checks
        self.verdict = finding_verdict(checks, gate_passed=self.gate is None, gate_pending=self.gate_pending)
        sentences = [check_sentence(check) + "." for check in checks]
        if self._sentences and self._sentences[0] in self.evidence:
            at = self.evidence.index(self._sentences[0])
            self.evidence[at:at + len(self._sentences)] = sentences
        else:
            self.evidence.extend(sentences)
        self._sentences = sentences
        table = None
        if checks:
            table = ("Checks: each a paired difference across seeds (or a rank correlation over runs), "
                     f"its 95% interval and its p value, raw and Holm-adjusted over {family}",
                     markdown_table(pd.DataFrame([check_row(c) for c in checks])))
        if self._table is not None and self._table in self.tables:
            at = self.tables.index(self._table)
            if table is None:
                del self.tables[at]
            else:
                self.tables[at] = table
        elif table is not None:
            self.tables.append(table)
        self._table = table


def adjust_families(findings: list[Finding]) -> None:
    """One Holm family per registry experiment: every check of the findings measured on
    one experiment is adjusted together, and each finding's verdict redrawn from its
    checks' adjusted p values (findings without an experiment keep their own family)."""
    families: dict[str, list[Finding]] = {}
    for finding in findings:
        if finding.experiment:
            families.setdefault(finding.experiment, []).append(finding)
    for experiment, members in families.items():
        adjusted = holm_adjusted([check for finding in members for check in finding.checks])
        size = len(adjusted)
        for finding in members:
            mine, adjusted = adjusted[:len(finding.checks)], adjusted[len(finding.checks):]
            finding.judge(mine, f"every check of experiment `{experiment}` (one family of {size})")


def experiment_of(study: Study) -> str:
    """The registry experiment of ``study``'s runs (empty when it has none or several)."""
    names = study.runs["experiment"].unique() if "experiment" in study.runs else []
    return str(names[0]) if len(names) == 1 else ""


def _default(study: Study) -> pd.DataFrame:
    runs = study.runs
    return runs[(runs["regime"] == "default") & (runs["slip"] == 0.0)]


def _only(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["run_id"].isin(runs["run_id"])]


def _arm(values: pd.DataFrame, runs: pd.DataFrame, column: str = "value", **labels) -> dict[int, float]:
    """Seed -> ``column`` for the runs among ``runs`` whose labels match ``labels``."""
    part = _only(values, runs)
    for key, value in labels.items():
        part = part[part[key] == value]
    return by_seed(part, column)


def _difference(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    """Per-seed a - b (seeds of both), for a check on a difference of differences."""
    return {seed: a[seed] - b[seed] for seed in a if seed in b}


def mi_early_warning(study: Study, figure_dir: Path) -> Finding:
    finding = Finding(
        "1", "Without filtering, MI falls while entropy stays high; reasoning gets shorter",
        "Without filtering, MI falls early while entropy spikes and stays high; MI drops "
        "before task success does; reasoning length falls monotonically (finding 1).")
    runs = _default(study)
    runs = runs[runs["filter"] == "none"]
    rows = []
    for env, env_runs in runs.groupby("env", sort=True):
        for label, name, direction in (("retrieval acc.", RETRIEVAL, -1), ("policy entropy", ENTROPY, 1),
                                       ("reasoning tokens", LENGTH, -1), ("success (t=0.5)", SUCCESS, 0)):
            per_run = _only(change(study, name), env_runs)
            rows.append({"env": env, "metric": label, "start": per_run["start"].mean(),
                         "end": per_run["end"].mean(), "change": per_run["change"].mean()})
            if direction:  # the paper predicts no direction for success here
                finding.checks.append(Check(f"{env}: {label} end - start",
                                            paired(by_seed(per_run, "end"), by_seed(per_run, "start")),
                                            direction))
    finding.conclude(experiment_of(study))
    finding.tables.insert(0, ("No filter, default settings: warm start -> endpoint, mean over seeds",
                              markdown_table(pd.DataFrame(rows))))
    finding.figure = figures.training_curves(study, _default(study), MAIN_FILTERS,
                                             [SUCCESS, RETRIEVAL, ENTROPY, LENGTH],
                                             figure_dir / "finding1_curves.png")
    return finding


def filter_ranking(study: Study, figure_dir: Path) -> Finding:
    finding = Finding("2", "Top-p > top-k > no filter on success",
                      "Top-p beats top-k beats no filter on task success, on average across "
                      "algorithms, scales and modalities (finding 2).")
    runs = _default(study)
    success, greedy = endpoint(study, SUCCESS), change(study, GREEDY)
    start = change(study, SUCCESS)
    rows = []
    for env in sorted(runs["env"].unique()):
        env_runs = runs[runs["env"] == env]
        for flt in MAIN_FILTERS:
            chosen = env_runs[env_runs["filter"] == flt]
            ends = _only(success, chosen)["value"]
            rows.append({"env": env, "filter": flt, "warm start t=0.5": _only(start, chosen)["start"].mean(),
                         "endpoint t=0.5 (seed range)": mean_and_range(ends),
                         "greedy: warm start": _only(greedy, chosen)["start"].mean(),
                         "greedy: endpoint": _only(greedy, chosen)["end"].mean(), "seeds": len(ends)})
        # the ranking is the two adjacent pairs; top-p against none is the headline gap
        for high, low in (("top-p 0.9", "top-k 0.5"), ("top-k 0.5", "none"), ("top-p 0.9", "none")):
            finding.checks.append(Check(f"{env}: success {high} - {low}",
                                        paired(_arm(success, env_runs, filter=high),
                                               _arm(success, env_runs, filter=low)), 1))
    finding.conclude(experiment_of(study))
    finding.tables.insert(0, ("Validation success, default settings (endpoint: mean of the "
                              "last checks after the warm start)", markdown_table(pd.DataFrame(rows))))
    finding.figure = figures.final_bars(study, runs, MAIN_FILTERS, SUCCESS,
                                        figure_dir / "finding2_success.png")
    return finding


def step_time(study: Study, figure_dir: Path) -> Finding:
    finding = Finding("3", "Filtering cuts step time",
                      "Filtering cuts step time by 26-41% because fewer groups enter the "
                      "gradient; memory is about equal (finding 3).")
    runs = _default(study)
    per_run = []
    for name in ("time/step", "time/diagnose", "time/update", "filter/kept_ratio"):
        means = window_mean(study, name).set_index("run_id")["value"].rename(name)
        per_run.append(means)
    frame = pd.concat(per_run, axis=1).reset_index().merge(runs, on="run_id")
    frame["step without diagnostics"] = frame["time/step"] - frame["time/diagnose"]
    table = frame.groupby(["env", "filter"], as_index=False, sort=False)[
        ["step without diagnostics", "time/update", "filter/kept_ratio"]].mean()
    table = table[table["filter"].isin(MAIN_FILTERS)]
    rows = []
    for env, part in table.groupby("env", sort=True):
        if "none" not in set(part["filter"]):
            continue
        base = part[part["filter"] == "none"].iloc[0]
        for _, row in part.iterrows():
            rows.append({"env": env, "filter": row["filter"],
                         "step s (no diagnostics)": row["step without diagnostics"],
                         "update s": row["time/update"], "kept ratio": row["filter/kept_ratio"],
                         "step vs none": row["step without diagnostics"] / base["step without diagnostics"],
                         "update vs none": row["time/update"] / base["time/update"]})
        env_frame = frame[frame["env"] == env]
        for flt in [f for f in ("top-k 0.5", "top-p 0.9") if f in set(part["filter"])]:
            finding.checks.append(Check(
                f"{env}: step s (no diagnostics) {flt} - none",
                paired(_arm(env_frame, env_frame, "step without diagnostics", filter=flt),
                       _arm(env_frame, env_frame, "step without diagnostics", filter="none")), -1))
    finding.conclude(experiment_of(study))
    threads = " or ".join(sorted({str(t) for t in runs["threads"]}))
    finding.tables.insert(0, ("Mean seconds per iteration over training (cells sharing the machine's "
                              f"cores, {threads} torch thread(s) each); the diagnostics' time is left out, "
                              "they run every few steps", markdown_table(pd.DataFrame(rows))))
    if rows:
        finding.figure = figures.step_time_bars(pd.DataFrame(rows), figure_dir / "finding3_step_time.png")
    return finding


CORRELATED = {
    "mi/trajectory/mi_zscore": "trajectory MI-ZScore",
    "mi/first_turn/mi_zscore": "first-turn MI-ZScore",
    "mi/first_turn/retrieval_acc": "first-turn retrieval acc.",
    "mi/trajectory/retrieval_acc": "trajectory retrieval acc.",
    "mi/first_turn/mi_est": "first-turn MI-Est",
    "mi/first_turn/policy_entropy": "first-turn policy entropy",
    "mi/trajectory/policy_entropy": "trajectory policy entropy",
    "mi/first_turn/h_cond": "first-turn H(Z|X)",
    "update/entropy": "update entropy",
    "mi/first_turn/reasoning_tokens": "reasoning tokens",
}


def spearman(study: Study, figure_dir: Path, figure: str = "finding4_spearman.png") -> Finding:
    finding = Finding("4", "Which diagnostic predicts final success",
                      "Over runs, trajectory MI-ZScore correlates with final performance "
                      "(Spearman +0.39) while entropy metrics do not (-0.11 to -0.14) (finding 4).")
    success = endpoint(study, SUCCESS).set_index("run_id")["value"].rename("success")
    both_scales = conventions.carries_both_scales(study)
    correlated = CORRELATED | (conventions.REFERENCE_SCALE if both_scales else {})
    diagnostics = {name: window_mean(study, name).set_index("run_id")["value"] for name in correlated}
    rows = []
    for env, runs in [("all runs", study.runs), *study.runs.groupby("env", sort=True)]:
        measured = {}
        for name, label in correlated.items():
            joined = pd.concat([diagnostics[name].rename("x"), success], axis=1, join="inner")
            joined = joined[joined.index.isin(runs["run_id"])]
            if joined.empty:
                continue
            measured[name] = result = spearman_interval(joined["x"].to_numpy(), joined["success"].to_numpy())
            rows.append({"runs": env, "diagnostic": label, "spearman": result.rho,
                         "95% CI (Fisher z)": f"[{result.low:+.2f}, {result.high:+.2f}]",
                         "p": result.p_value, "n": result.n})
        if env == "all runs":
            continue  # environments differ in success level: the pooled rho mixes them
        if "mi/trajectory/mi_zscore" in measured:
            finding.checks.append(Check(f"{env}: Spearman(trajectory MI-ZScore, success)",
                                        measured["mi/trajectory/mi_zscore"], 1))
        if "mi/trajectory/mi_zscore_of_means" in measured:
            finding.checks.append(Check(f"{env}: Spearman(trajectory MI-ZScore on RAGEN's scale, success)",
                                        measured["mi/trajectory/mi_zscore_of_means"], 1))
        entropy = measured.get("mi/first_turn/policy_entropy")
        if entropy is not None and not entropy.too_few:
            excludes = entropy.low > 0 or entropy.high < 0
            finding.evidence.append(
                f"{env}: first-turn policy entropy rho {entropy.rho:+.2f} [{entropy.low:+.2f}, "
                f"{entropy.high:+.2f}], {'which excludes 0, against' if excludes else 'which contains 0, as'} "
                "the paper's reading that entropy does not predict success.")
    finding.conclude(experiment_of(study))
    table = pd.DataFrame(rows, columns=["runs", "diagnostic", "spearman", "95% CI (Fisher z)", "p", "n"])
    scale = ("MI-Est and MI-ZScore on MIRAGE's per-token scale (PAPER.md's formula), rows marked "
             "\"RAGEN scale\" on the reference code's (docs/conventions.md)" if both_scales else
             "MI-Est and MI-ZScore on MIRAGE's per-token scale (PAPER.md's formula) only: these runs "
             "predate the reference code's scale, which the paper's table uses (docs/conventions.md)")
    finding.tables.insert(0, ("Spearman of each diagnostic (mean over training steps) with the "
                              "run's success endpoint at t=0.5, within each environment and pooled; "
                              + scale, markdown_table(table)))
    if not table.empty:
        finding.figure = figures.correlation_bars(table, figure_dir / figure)
    return finding


MIN_SPEARMAN_RUNS = 6  # a later study's finding 4 needs at least this many finished runs


def spearman_on_both_scales(everything: Study, experiments: Sequence[str], figure_dir: Path) -> list[Finding]:
    """Finding 4 measured again on each of ``experiments`` (studies run since #46) whose
    runs carry both per-token MI scales, as the paper's table is on the reference code's;
    none for an experiment with fewer than MIN_SPEARMAN_RUNS finished runs."""
    found = []
    for name in experiments:
        study = everything.of(name)
        if len(study.runs) < MIN_SPEARMAN_RUNS or not conventions.carries_both_scales(study):
            continue
        finding = spearman(study, figure_dir, f"finding4_spearman_{name}.png")
        finding.key = f"4 on `{name}`"
        finding.title += ", on both MI scales"
        seeds = study.runs["seed"].nunique()
        finding.evidence.insert(0, f"Measured on the {len(study.runs)} finished runs of `{name}` ({seeds} "
                                   f"seed{'s' if seeds != 1 else ''}), whose runs log MI-Est and MI-ZScore on "
                                   "both per-token scales (docs/conventions.md)"
                                   + ("; a calibration's cells differ in their settings, so the correlation "
                                      "over them mostly ranks its regimes, not runs of one setting"
                                      if seeds == 1 else "") + ".")
        found.append(finding)
    return found


def stochasticity(study: Study, figure_dir: Path) -> Finding:
    finding = Finding("7", "FrozenLake stochasticity: filtering helps when the reward is informative",
                      "As slip goes 0 -> 100%, return falls, conditional entropy rises, I(X;Z) "
                      "falls; filtering's advantage is clear at 0-50% and vanishes at 80-100% (finding 7).")
    runs = study.runs[(study.runs["env"] == "frozenlake") & (study.runs["regime"] == "default")
                      & study.runs["filter"].isin(["none", "top-p 0.9"])]
    success = _only(endpoint(study, SUCCESS), runs)
    h_cond = _only(endpoint(study, H_COND), runs)
    retrieval = _only(endpoint(study, RETRIEVAL), runs)
    table = over_seeds(success, ["slip", "filter"]).sort_values(["slip", "filter"])
    table["success t=0.5"] = mean_with_spread(table)
    for name, values in (("H(Z|X)", h_cond), ("retrieval acc.", retrieval)):
        means = values.groupby(["slip", "filter"])["value"].mean().rename(name)
        table = table.merge(means, left_on=["slip", "filter"], right_index=True)
    slips = sorted(runs["slip"].unique())
    low, high = slips[0], slips[-1]
    for label, values, direction in (("success", success, -1), ("H(Z|X)", h_cond, 1),
                                     ("retrieval acc.", retrieval, -1)):
        finding.checks.append(Check(f"no filter: {label} at slip {high:g} - at slip {low:g}",
                                    paired(_arm(values, runs, slip=high, filter="none"),
                                           _arm(values, runs, slip=low, filter="none")), direction))
    gains = {s: _difference(_arm(success, runs, slip=s, filter="top-p 0.9"),
                            _arm(success, runs, slip=s, filter="none")) for s in slips}
    finding.checks.append(Check(f"top-p gain in success at slip {low:g} - at slip {high:g}",
                                paired(gains[low], gains[high]), 1))
    finding.evidence.append("top-p minus none in success at each slip (mean over seeds): " + ", ".join(
        f"{s:g}: {sum(g.values()) / max(1, len(g)):+.3f}" for s, g in gains.items()) + ".")
    finding.conclude(experiment_of(study))
    shown_columns = ["slip", "filter", "success t=0.5", "H(Z|X)", "retrieval acc.", "seeds"]
    finding.tables.insert(0, ("FrozenLake by slip: endpoints, success with its seed range",
                              markdown_table(table[shown_columns])))
    finding.figure = figures.slip_lines(table, figure_dir / "finding7_slip.png")
    return finding


ABLATION = ["none", "top-p 0.9", "top-k 0.5", "top-k 0.5 smallest", "entropy 0.5", "length 0.5"]


def ablation(study: Study, figure_dir: Path) -> Finding:
    finding = Finding("11", "Sokoban ablation: which groups to keep, ranked by what",
                      "Sokoban, task success / MI / entropy: no filter 0.17 / 0.54 / 2.76; "
                      "keep-largest 0.44 / 0.89 / 1.47; keep-smallest 0.29 / 0.47 / 5.31; a length "
                      "filter reaches MI 0.91 but lower success (finding 11).")
    runs = _default(study)
    runs = runs[(runs["env"] == "sokoban") & runs["filter"].isin(ABLATION)]
    values = {label: _only(endpoint(study, name), runs) for label, name in
              (("success", SUCCESS), ("retrieval", RETRIEVAL), ("entropy", ENTROPY))}
    rows = []
    for flt in [f for f in ABLATION if f in set(runs["filter"])]:
        row = {"filter": flt}
        for label, frame in values.items():
            part = frame[frame["filter"] == flt]["value"]
            row[f"{label} (endpoint)"] = part.mean()
            row[f"{label} range"] = seed_range(part)
        rows.append(row)
    for label, high, low in (("success", "top-k 0.5", "top-k 0.5 smallest"),
                             ("retrieval", "top-k 0.5", "top-k 0.5 smallest"),
                             ("entropy", "top-k 0.5 smallest", "top-k 0.5"),
                             ("success", "top-k 0.5", "entropy 0.5"),
                             ("success", "top-k 0.5", "length 0.5")):
        finding.checks.append(Check(f"{label} {high} - {low}",
                                    paired(_arm(values[label], runs, filter=high),
                                           _arm(values[label], runs, filter=low)), 1))
    finding.conclude(experiment_of(study))
    finding.tables.insert(0, ("Sokoban endpoints, mean over seeds (keep-largest / keep-smallest "
                              "rank by reward variance and keep half the prompts)",
                              markdown_table(pd.DataFrame(rows))))
    finding.figure = figures.ablation_bars(pd.DataFrame(rows), figure_dir / "finding11_ablation.png")
    return finding


# "near chance" means within this much of 1/C: the paper's collapsed runs sit close to it
NEAR_CHANCE = 0.1


def provoked_collapse(study: Study, figure_dir: Path) -> Finding:
    finding = Finding("collapse", "Provoking template collapse",
                      "Template collapse: reasoning stops depending on the input (retrieval "
                      "accuracy falls towards chance) while entropy stays high; RV filtering "
                      "is the remedy (PAPER.md sections 1 and 4).")
    runs = study.runs[study.runs["regime"] == "provoked"]
    if runs.empty:
        finding.evidence.append("The study has no run in the provoked regime.")
        return finding
    chance = study.metrics[study.metrics["name"] == CHANCE]["value"].mean()
    rows, changes = [], {}
    for flt, part in runs.groupby("filter", sort=False):
        for label, name in (("retrieval acc.", RETRIEVAL), ("policy entropy", ENTROPY),
                            ("success (t=0.5)", SUCCESS)):
            per_run = _only(change(study, name), part)
            changes[(flt, name)] = per_run
            rows.append({"filter": flt, "metric": label, "start": per_run["start"].mean(),
                         "end": per_run["end"].mean(), "change": per_run["change"].mean(),
                         "end range": seed_range(per_run["end"])})
    if ("none", RETRIEVAL) in changes:
        none = changes[("none", RETRIEVAL)]
        finding.checks.append(Check("no filter: retrieval acc. end - start",
                                    paired(by_seed(none, "end"), by_seed(none, "start")), -1))
        near = {seed: chance + NEAR_CHANCE for seed in by_seed(none, "end")}
        finding.checks.append(Check(f"no filter: retrieval acc. end - (chance + {NEAR_CHANCE:g})",
                                    paired(by_seed(none, "end"), near), -1))
        entropy = changes[("none", ENTROPY)]
        finding.checks.append(Check("no filter: policy entropy end - start",
                                    paired(by_seed(entropy, "end"), by_seed(entropy, "start")), 1))
        if ("top-p 0.9", RETRIEVAL) in changes:
            finding.checks.append(Check("retrieval acc. end: top-p 0.9 - none",
                                        paired(by_seed(changes[("top-p 0.9", RETRIEVAL)], "end"),
                                               by_seed(none, "end")), 1))
    finding.evidence.append(f"Retrieval chance 1/C = {chance:.3f}.")
    finding.conclude(experiment_of(study))
    settings = runs.iloc[0]
    finding.tables.insert(0, (f"{', '.join(sorted(runs['env'].unique()))}, lr {settings['lr']:g}, entropy "
                              f"coefficient {settings['entropy_coef']:g}: warm start -> endpoint, mean over seeds",
                              markdown_table(pd.DataFrame(rows))))
    finding.tables.append((regime.signature_caption(),
                           markdown_table(regime.signature_table(study, runs, ["env", "filter"]))))
    finding.tables.append((preconditions.caption(),
                           markdown_table(preconditions.preconditions_table(study, runs, ["env", "filter"]))))
    unfiltered = runs[runs["filter"] == "none"]
    if (noise := regime.noise_sentence(study, unfiltered, "unfiltered seeds")):
        finding.evidence.append(noise + ".")
    sentence, samples = regime.samples_at_endpoints(study, unfiltered, ["filter"])
    finding.tables += [(caption, markdown_table(table)) for caption, table in samples]
    if sentence:
        finding.evidence.append(sentence)
    finding.figure = figures.training_curves(study, runs, list(runs["filter"].unique()),
                                             [SUCCESS, RETRIEVAL, ENTROPY, LENGTH],
                                             figure_dir / "collapse_curves.png", chance=chance)
    return finding


FINDINGS = [mi_early_warning, filter_ranking, step_time, spearman, stochasticity, ablation,
            provoked_collapse]

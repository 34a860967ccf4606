"""Each of the paper's findings the study re-measures: its claim, the measured table, a
figure and a verdict computed from the numbers by a stated rule (PAPER.md section 5).

Verdicts use the seeds, not significance tests (3 seeds cannot carry one): an effect
"shows" when every seed moves the same way (changes) or when the difference of means
exceeds the larger seed spread of the two sides (comparisons).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from mirage.core.correlation import diagnostic_success_correlation
from mirage.report import figures
from mirage.report.results import Study
from mirage.report.summary import (change, markdown_table, mean_and_range, mean_with_spread,
                                   over_seeds, same_sign, seed_range, window_mean)

SUCCESS = "val/success"  # temperature 0.5, as the paper evaluates
GREEDY = "val_greedy/success"
RETRIEVAL = "mi/first_turn/retrieval_acc"
CHANCE = "mi/first_turn/retrieval_chance"
ENTROPY = "mi/first_turn/policy_entropy"
H_COND = "mi/first_turn/h_cond"
LENGTH = "mi/first_turn/reasoning_tokens"

HOLDS, PARTLY, NOT = "holds", "holds partly", "does not hold at this scale"
MAIN_FILTERS = ["none", "top-k 0.5", "top-p 0.9"]


@dataclass
class Finding:
    key: str
    title: str
    claim: str
    verdict: str = NOT
    evidence: list[str] = field(default_factory=list)
    tables: list[tuple[str, str]] = field(default_factory=list)
    figure: str | None = None


def _default(study: Study) -> pd.DataFrame:
    runs = study.runs
    return runs[(runs["regime"] == "default") & (runs["slip"] == 0.0)]


def _only(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["run_id"].isin(runs["run_id"])]


def _beats(a: pd.Series, b: pd.Series) -> bool:
    """Mean of ``a`` above mean of ``b`` by more than either side's seed spread."""
    spread = max(a.max() - a.min(), b.max() - b.min())
    return a.mean() - b.mean() > spread


def _verdict(shown: int, total: int) -> str:
    return HOLDS if shown == total else PARTLY if shown else NOT


def mi_early_warning(study: Study, figure_dir: Path) -> Finding:
    finding = Finding(
        "1", "Without filtering, MI falls while entropy stays high; reasoning gets shorter",
        "Without filtering, MI falls early while entropy spikes and stays high; MI drops "
        "before task success does; reasoning length falls monotonically (finding 1).")
    runs = _default(study)
    runs = runs[runs["filter"] == "none"]
    rows, shown = [], 0
    for env, env_runs in runs.groupby("env", sort=True):
        signs = {}
        for label, name in (("retrieval acc.", RETRIEVAL), ("policy entropy", ENTROPY),
                            ("reasoning tokens", LENGTH), ("success (t=0.5)", SUCCESS)):
            per_run = _only(change(study, name), env_runs)
            signs[name] = same_sign(per_run["change"])
            rows.append({"env": env, "metric": label, "start": per_run["start"].mean(),
                         "end": per_run["end"].mean(), "change": per_run["change"].mean(),
                         "seeds moving the same way": {1: "all up", -1: "all down", 0: "mixed"}[signs[name]]})
        mi_falls = signs[RETRIEVAL] < 0
        shown += mi_falls + (signs[ENTROPY] >= 0 and mi_falls) + (signs[LENGTH] < 0)
        finding.evidence.append(
            f"{env}: retrieval accuracy {'falls in every seed' if mi_falls else 'does not fall in every seed'}, "
            f"entropy {'rises in every seed' if signs[ENTROPY] > 0 else 'falls in every seed' if signs[ENTROPY] < 0 else 'moves both ways'}, "
            f"reasoning length {'falls in every seed' if signs[LENGTH] < 0 else 'does not fall in every seed'}.")
    finding.verdict = _verdict(shown, 3 * runs["env"].nunique())
    finding.tables.append(("No filter, default settings: first step -> last step, mean over seeds",
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
    rows, shown = [], 0
    envs = sorted(runs["env"].unique())
    for env in envs:
        finals = {}
        for flt in MAIN_FILTERS:
            chosen = runs[(runs["env"] == env) & (runs["filter"] == flt)]
            finals[flt] = _only(study.final(SUCCESS), chosen)["value"]
            greedy = _only(change(study, GREEDY), chosen)
            start = _only(change(study, SUCCESS), chosen)["start"]
            rows.append({"env": env, "filter": flt, "warm start t=0.5": start.mean(),
                         "final t=0.5 (seed range)": mean_and_range(finals[flt]),
                         "greedy: warm start": greedy["start"].mean(), "greedy: final": greedy["end"].mean(),
                         "seeds": len(finals[flt])})
        ordered = finals["top-p 0.9"].mean() > finals["top-k 0.5"].mean() > finals["none"].mean()
        clear = _beats(finals["top-p 0.9"], finals["none"])
        shown += ordered + clear
        finding.evidence.append(
            f"{env}: the means {'are' if ordered else 'are not'} ordered top-p > top-k > none; "
            f"top-p minus none = {finals['top-p 0.9'].mean() - finals['none'].mean():+.3f}, "
            f"{'more' if clear else 'less'} than the seed spread.")
    finding.verdict = _verdict(shown, 2 * len(envs))
    finding.tables.append(("Final validation success, default settings", markdown_table(pd.DataFrame(rows))))
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
    rows, shown = [], 0
    for env, part in table.groupby("env", sort=True):
        if not {"none", "top-p 0.9"} <= set(part["filter"]):
            continue
        base = part[part["filter"] == "none"].iloc[0]
        for _, row in part.iterrows():
            rows.append({"env": env, "filter": row["filter"],
                         "step s (no diagnostics)": row["step without diagnostics"],
                         "update s": row["time/update"], "kept ratio": row["filter/kept_ratio"],
                         "step vs none": row["step without diagnostics"] / base["step without diagnostics"],
                         "update vs none": row["time/update"] / base["time/update"]})
        cut = 1 - part[part["filter"] == "top-p 0.9"].iloc[0]["step without diagnostics"] / base["step without diagnostics"]
        shown += 2 if cut >= 0.2 else 1 if cut > 0.05 else 0
        finding.evidence.append(f"{env}: top-p 0.9 changes the step time by {-cut:+.0%} against no filter.")
    finding.verdict = _verdict(shown, 2 * max(1, len(finding.evidence)))
    finding.tables.append(("Mean seconds per iteration over training (2 cells sharing 2 cores, "
                           "one torch thread each); the diagnostics' time is left out, they run every few steps",
                           markdown_table(pd.DataFrame(rows))))
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


def spearman(study: Study, figure_dir: Path) -> Finding:
    finding = Finding("4", "Which diagnostic predicts final success",
                      "Over runs, trajectory MI-ZScore correlates with final performance "
                      "(Spearman +0.39) while entropy metrics do not (-0.11 to -0.14) (finding 4).")
    metrics = study.metrics[(study.metrics["step"] >= 1) | (study.metrics["name"] == SUCCESS)]
    rows, shown, counted = [], 0, 0
    for env, runs in [("all runs", study.runs), *study.runs.groupby("env", sort=True)]:
        result = diagnostic_success_correlation(_only(metrics, runs), window=(1, 10**9))
        result = result[result["diagnostic"].isin(CORRELATED)].set_index("diagnostic")
        for name, label in CORRELATED.items():
            if name in result.index:
                rows.append({"runs": env, "diagnostic": label, "spearman": result.loc[name, "spearman"],
                             "p": result.loc[name, "p_value"], "n": int(result.loc[name, "runs"])})
        if env == "all runs":
            continue  # environments differ in success level: the pooled rho mixes them
        zscore = result["spearman"].get("mi/trajectory/mi_zscore", float("nan"))
        entropy = result["spearman"].get("mi/first_turn/policy_entropy", float("nan"))
        counted += 2
        shown += (zscore > 0) + (entropy < 0)
        finding.evidence.append(f"{env} ({len(runs)} runs): trajectory MI-ZScore rho = {zscore:+.2f}, "
                                f"first-turn policy entropy rho = {entropy:+.2f}.")
    finding.verdict = _verdict(shown, counted)
    table = pd.DataFrame(rows, columns=["runs", "diagnostic", "spearman", "p", "n"])
    finding.tables.append(("Spearman of each diagnostic (mean over training steps) with the run's "
                           "final success at t=0.5, within each environment and pooled",
                           markdown_table(table)))
    if not table.empty:
        finding.figure = figures.correlation_bars(table, figure_dir / "finding4_spearman.png")
    return finding


def stochasticity(study: Study, figure_dir: Path) -> Finding:
    finding = Finding("7", "FrozenLake stochasticity: filtering helps when the reward is informative",
                      "As slip goes 0 -> 100%, return falls, conditional entropy rises, I(X;Z) "
                      "falls; filtering's advantage is clear at 0-50% and vanishes at 80-100% (finding 7).")
    runs = study.runs[(study.runs["env"] == "frozenlake") & (study.runs["regime"] == "default")
                      & study.runs["filter"].isin(["none", "top-p 0.9"])]
    success = _only(study.final(SUCCESS), runs)
    h_cond = _only(window_mean(study, H_COND), runs)
    retrieval = _only(window_mean(study, RETRIEVAL), runs)
    table = over_seeds(success, ["slip", "filter"]).sort_values(["slip", "filter"])
    table["success t=0.5"] = mean_with_spread(table)
    for name, values in (("H(Z|X)", h_cond), ("retrieval acc.", retrieval)):
        means = values.groupby(["slip", "filter"])["value"].mean().rename(name)
        table = table.merge(means, left_on=["slip", "filter"], right_index=True)
    slips = sorted(runs["slip"].unique())
    low, high = slips[0], slips[-1]

    def at(frame, slip, flt):
        return frame[(frame["slip"] == slip) & (frame["filter"] == flt)]["value"]

    falls = at(success, low, "none").mean() > at(success, high, "none").mean()
    rises = at(h_cond, high, "none").mean() > at(h_cond, low, "none").mean()
    mi_falls = at(retrieval, high, "none").mean() < at(retrieval, low, "none").mean()
    gains = {s: at(success, s, "top-p 0.9").mean() - at(success, s, "none").mean() for s in slips}
    fades = max(gains[s] for s in slips if s < 0.5) > gains[high]
    finding.evidence.append(
        f"no filter, slip {low:g} -> {high:g}: success {'falls' if falls else 'does not fall'}, "
        f"H(Z|X) {'rises' if rises else 'does not rise'}, retrieval accuracy {'falls' if mi_falls else 'does not fall'}.")
    finding.evidence.append("top-p minus none at each slip: " + ", ".join(
        f"{s:g}: {g:+.3f}" for s, g in gains.items()) + ".")
    finding.verdict = _verdict(falls + rises + mi_falls + fades, 4)
    shown_columns = ["slip", "filter", "success t=0.5", "H(Z|X)", "retrieval acc.", "seeds"]
    finding.tables.append(("FrozenLake by slip: final success (seed range); H(Z|X) and retrieval "
                           "accuracy averaged over training", markdown_table(table[shown_columns])))
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
    values = {label: _only(study.final(name), runs) for label, name in
              (("success", SUCCESS), ("retrieval", RETRIEVAL), ("entropy", ENTROPY))}
    rows = []
    for flt in [f for f in ABLATION if f in set(runs["filter"])]:
        row = {"filter": flt}
        for label, frame in values.items():
            part = frame[frame["filter"] == flt]["value"]
            row[f"{label} (final)"] = part.mean()
            row[f"{label} range"] = seed_range(part)
        rows.append(row)

    def of(label, flt):
        return values[label][values[label]["filter"] == flt]["value"]

    checks = [
        ("keep-largest beats keep-smallest on success", _beats(of("success", "top-k 0.5"), of("success", "top-k 0.5 smallest"))),
        ("keep-largest beats keep-smallest on retrieval accuracy", _beats(of("retrieval", "top-k 0.5"), of("retrieval", "top-k 0.5 smallest"))),
        ("keep-smallest has the higher entropy", of("entropy", "top-k 0.5 smallest").mean() > of("entropy", "top-k 0.5").mean()),
        ("ranking by variance beats ranking by entropy on success", _beats(of("success", "top-k 0.5"), of("success", "entropy 0.5"))),
        ("ranking by variance beats ranking by length on success", _beats(of("success", "top-k 0.5"), of("success", "length 0.5"))),
    ]
    finding.evidence.extend(f"{text}: {'yes' if ok else 'no'}." for text, ok in checks)
    finding.verdict = _verdict(sum(ok for _, ok in checks), len(checks))
    finding.tables.append(("Sokoban, last step, mean over seeds (keep-largest / keep-smallest "
                           "rank by reward variance and keep half the prompts)",
                           markdown_table(pd.DataFrame(rows))))
    finding.figure = figures.ablation_bars(pd.DataFrame(rows), figure_dir / "finding11_ablation.png")
    return finding


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
    rows, ends = [], {}
    for flt, part in runs.groupby("filter", sort=False):
        for label, name in (("retrieval acc.", RETRIEVAL), ("policy entropy", ENTROPY),
                            ("success (t=0.5)", SUCCESS)):
            per_run = _only(change(study, name), part)
            ends[(flt, name)] = per_run
            rows.append({"filter": flt, "metric": label, "start": per_run["start"].mean(),
                         "end": per_run["end"].mean(), "change": per_run["change"].mean(),
                         "end range": seed_range(per_run["end"])})
    none = ends.get(("none", RETRIEVAL))
    collapsed = none is not None and same_sign(none["change"]) < 0
    near_chance = none is not None and none["end"].mean() <= chance + 0.1
    entropy_kept = ("none", ENTROPY) in ends and ends[("none", ENTROPY)]["change"].mean() > -0.1 * ends[("none", ENTROPY)]["start"].mean()
    remedy = ("top-p 0.9", RETRIEVAL) in ends and none is not None and _beats(
        ends[("top-p 0.9", RETRIEVAL)]["end"], none["end"])
    finding.evidence.append(
        f"no filter: retrieval accuracy {'falls in every seed' if collapsed else 'does not fall in every seed'}"
        f" to {none['end'].mean():.3f} (chance {chance:.3f}); entropy "
        f"{'stays within 10% of its start or rises' if entropy_kept else 'falls by more than 10%'}.")
    finding.evidence.append(f"top-p 0.9 ends with {'higher retrieval accuracy than no filter, beyond the seed spread' if remedy else 'no retrieval accuracy gain beyond the seed spread'}.")
    finding.verdict = _verdict(collapsed + near_chance + entropy_kept + remedy, 4)
    settings = runs.iloc[0]
    finding.tables.append((f"{', '.join(sorted(runs['env'].unique()))}, lr {settings['lr']:g}, entropy "
                           f"coefficient {settings['entropy_coef']:g}: first -> last step, mean over seeds",
                           markdown_table(pd.DataFrame(rows))))
    finding.figure = figures.training_curves(study, runs, list(runs["filter"].unique()),
                                             [SUCCESS, RETRIEVAL, ENTROPY, LENGTH],
                                             figure_dir / "collapse_curves.png", chance=chance)
    return finding


FINDINGS = [mi_early_warning, filter_ranking, step_time, spearman, stochasticity, ablation,
            provoked_collapse]

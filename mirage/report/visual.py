"""The visual study's section (registry experiment ``visual``, issue #42): Sokoban and
FrozenLake seen as pictures beside the same environments read as text, no filter against
top-p 0.9 in the paper's main-table setting (softmax over the reward std, zero-variance
groups eligible) and, on pictures, in the linear default; seeds paired. The success
differences beside RAGEN-2's main-table rows, whether reward variance fell without a
filter, and each run's regime signature."""

from __future__ import annotations

import pandas as pd

from mirage.report import induced, preconditions, regime
from mirage.report.findings import Finding
from mirage.report.names import RETRIEVAL, SUCCESS
from mirage.report.paired import Paired, paired
from mirage.report.results import VISUAL, Study
from mirage.report.summary import LAST_CHECKS, by_seed, endpoint, markdown_table
from mirage.report.verdicts import Check

KEY = "visual study"
TITLE = f"Seeing the room: the paper's visual rows at CPU scale (experiment `{VISUAL}`)"
NONE, MAIN, LINEAR = "none", "top-p 0.9, main table", "top-p 0.9, linear"
ARMS = (NONE, MAIN, LINEAR)
# RAGEN-2's main table (issue #42): Qwen2.5-VL-3B, success in points without -> with the filter
PAPER = {("frozenlake", "image"): (19.5, 79.0), ("sokoban", "image"): (65.0, 77.0)}
PAPER_GAIN = {("frozenlake", "image"): 59.5, ("sokoban", "image"): 12.0,
              ("frozenlake", "text"): 53.5, ("sokoban", "text"): 6.0}


def arm(run) -> str:
    """A run's arm from its labels: no filter, top-p in the main-table setting, or linear top-p."""
    if run.filter == NONE:
        return NONE
    return MAIN if run.filter_mode == "softmax" else LINEAR


def visual_study(everything: Study) -> list[Finding]:
    """The section (none when the results hold no run of the experiment)."""
    study = everything.of(VISUAL)
    if study.runs.empty:
        return []
    runs = study.runs.assign(arm=[arm(run) for run in study.runs.itertuples()])
    success = endpoint(study, SUCCESS).merge(runs[["run_id", "arm"]], on="run_id")
    finding = Finding(KEY, TITLE,
                      "Reward-variance filtering helps on pictures as on text, and most there: in RAGEN-2's "
                      "main table top-p takes Qwen2.5-VL-3B from 19.5 to 79.0 success on visual FrozenLake "
                      "(+59.5) and from 65.0 to 77.0 on visual Sokoban (+12.0), against +53.5 and +6.0 for "
                      "the same model reading text (PAPER.md section 6.3).")
    finding.evidence.append(
        f"{runs['seed'].nunique()} paired seeds per arm where finished ({_seeds(runs)}), "
        f"{' or '.join(str(s) for s in sorted(runs['steps'].unique()))} iterations of "
        f"{runs['prompts'].iloc[0]} x {runs['group_size'].iloc[0]}, "
        f"{' or '.join(str(v) for v in sorted(runs['validation_episodes'].unique()))} validation episodes at "
        f"temperature 0.5; success is each run's endpoint, the mean of its last {LAST_CHECKS} validations "
        "(the warm start's, at step 0, is not one); the tiny shipped policies, not a 3B model.")
    rows = []
    for (env, observation), cell in runs.groupby(["env", "observation"], sort=True):
        unfiltered = cell[cell["arm"] == NONE]
        variance, _ = induced.reward_variance(study, unfiltered)
        if variance:
            finding.evidence.append(f"{env}, {observation}: {variance}.")
        for other in (MAIN, LINEAR):
            if not (cell["arm"] == other).any() or unfiltered.empty:
                continue
            comparison = _compare(success, cell, other)
            label = f"success {env} {observation}: {other} - {NONE}"
            finding.checks.append(Check(label, comparison, 1))
            rows.append(_row(study, cell, env, observation, other, comparison))
    finding.conclude(VISUAL)
    finding.tables.insert(0, ("Text beside image: success at the warm start and at the endpoint "
                              "(mean over the seeds both arms have finished), the paired difference from no filter with its 95% "
                              "interval, and RAGEN-2's difference for Qwen2.5-VL-3B in points "
                              "(a 0-1 success here)", markdown_table(pd.DataFrame(rows))))
    finding.evidence.append(_against_paper(finding.checks))
    finding.tables.append(("Endpoints per run (mean of the last checks)", markdown_table(_endpoints(study, runs))))
    if study.stopped is not None and not study.stopped.empty:
        stopped = _stopped(study)
        finding.evidence.append(
            f"{len(stopped)} run(s) stopped themselves before their last iteration and are left out of "
            "every paired difference and endpoint above (a shorter run is not a finished one): "
            + "; ".join(f"{row.env} {row.observation} {row.arm} seed {row.seed} at step {row.step}"
                        for row in stopped.itertuples()) + " (table below).")
        finding.tables.append(("Runs that stopped themselves (a stop rule fired; not interrupted): the "
                               "step, the rule, and the last validation before the stop",
                               markdown_table(stopped)))
    labels = ["env", "observation", "arm"]
    finding.tables.append((regime.signature_caption(),
                           markdown_table(regime.signature_table(study, runs, labels))))
    finding.tables.append((preconditions.caption(),
                           markdown_table(preconditions.preconditions_table(study, runs, labels))))
    return [finding]


def _seeds(runs: pd.DataFrame) -> str:
    return "seeds " + ", ".join(str(s) for s in sorted(runs["seed"].unique()))


def _compare(success: pd.DataFrame, cell: pd.DataFrame, other: str) -> Paired:
    """``other`` minus no filter over the seeds both have finished (a study still running
    has some seeds in one arm only)."""
    part = success[success["run_id"].isin(cell["run_id"])]
    first, second = by_seed(part[part["arm"] == other]), by_seed(part[part["arm"] == NONE])
    seeds = set(first) & set(second)
    return paired({s: first[s] for s in seeds}, {s: second[s] for s in seeds})


def _start(study: Study, runs: pd.DataFrame) -> float:
    rows = study.series(SUCCESS)
    rows = rows[rows["run_id"].isin(runs["run_id"]) & (rows["step"] == 0)]
    return float(rows["value"].mean()) if len(rows) else float("nan")


def _row(study: Study, cell: pd.DataFrame, env: str, observation: str, other: str, c: Paired) -> dict:
    ends = endpoint(study, SUCCESS).set_index("run_id")["value"]
    none, arm_runs = cell[cell["arm"] == NONE], cell[cell["arm"] == other]
    paired_seeds = set(none["seed"]) & set(arm_runs["seed"])  # the means over the seeds compared
    none, arm_runs = none[none["seed"].isin(paired_seeds)], arm_runs[arm_runs["seed"].isin(paired_seeds)]
    paper = PAPER_GAIN.get((env, observation)) if other == MAIN else None
    return {"env": env, "observation": observation, "arm": other, "seeds": c.n,
            "start": _start(study, cell),
            f"{NONE} end": float(ends.reindex(none["run_id"]).mean()),
            "arm end": float(ends.reindex(arm_runs["run_id"]).mean()),
            "difference": f"{c.mean:+.3f} [{c.low:+.3f}, {c.high:+.3f}]" if not c.too_few else f"{c.mean:+.3f}",
            "RAGEN-2 (3B), points": f"{paper:+.1f}" if paper is not None else "-"}


def _against_paper(checks: list[Check]) -> str:
    """Which rows match the paper's direction (top-p above no filter, detected) and which do not."""
    held = [c.label for c in checks if c.verdict == "holds"]
    other = [f"{c.label} ({c.verdict})" for c in checks if c.verdict != "holds"]
    return ("Against RAGEN-2's table, where every filtered row is above its unfiltered one: "
            + (f"the same direction is detected in {', '.join(held)}" if held else
               "no row shows the paper's gain detectably")
            + (f"; not in {', '.join(other)}" if other else "") + ".")


def _endpoints(study: Study, runs: pd.DataFrame) -> pd.DataFrame:
    success, retrieval = (endpoint(study, name).set_index("run_id")["value"] for name in (SUCCESS, RETRIEVAL))
    ordered = runs.sort_values(["env", "observation", "arm", "seed"],
                               key=lambda c: c.map(ARMS.index) if c.name == "arm" else c)
    return pd.DataFrame([{"env": run.env, "observation": run.observation, "arm": run.arm, "seed": run.seed,
                          "success": success.get(run.run_id, float("nan")),
                          "first-turn retrieval": retrieval.get(run.run_id, float("nan"))}
                         for run in ordered.itertuples()])


def _stopped(study: Study) -> pd.DataFrame:
    """The self-stopped runs: labels, the step they stopped at, why, and their last
    validated success and first-turn retrieval (with the step of that check)."""
    rows = []
    for run in study.stopped.assign(arm=[arm(r) for r in study.stopped.itertuples()]).sort_values(
            ["env", "observation", "arm", "seed"]).itertuples():
        own = study.stopped_metrics[study.stopped_metrics["run_id"] == run.run_id]
        last = {}
        for name in (SUCCESS, RETRIEVAL):
            checks = own[own["name"] == name].sort_values("step")
            last[name] = (checks["value"].iloc[-1], int(checks["step"].iloc[-1])) if len(checks) else (float("nan"), -1)
        rows.append({"env": run.env, "observation": run.observation, "arm": run.arm, "seed": run.seed,
                     "step": int(run.last_step), "rule": str(run.reason).split(": ", 1)[-1],
                     "last success": last[SUCCESS][0], "at step": last[SUCCESS][1],
                     "last first-turn retrieval": last[RETRIEVAL][0]})
    return pd.DataFrame(rows)

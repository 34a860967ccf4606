"""The reasoning regime in the report: per run, its regime by the sustained rule
(mirage/report/sustained.py: the endpoint of its last K checks, regimes held for K
checks; each check read by mirage/core/analysis/signature.py, the rule `core show` and the
app apply), the samples at its endpoint checks, the
calibration sweeps cell by cell, and the regulariser's share of the gradient per
reward-variance bucket at the checks before any run's format broke (PAPER.md section 3)."""

from __future__ import annotations

import re

import pandas as pd

from mirage.core.analysis import signature as sig
from mirage.envs import frozenlake, sokoban
from mirage.report import sustained
from mirage.report.names import FORMAT, H_COND, RETRIEVAL, SUCCESS
from mirage.report.results import GRADIENTS, Study
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
    """One table row's worth, read by the sustained rule (mirage/report/sustained.py): the
    regime at the run's endpoint with the readings it averages, the regimes held for K
    consecutive checks with the first step of each, how many single checks fell in
    template collapse, and the extremes over the run."""
    found = checks(study, run_id)
    end = sustained.endpoint_check(found)
    if end is None:
        return {"regime (endpoint)": "not measured"}
    single = sum(c.regime == sig.TEMPLATE_COLLAPSE for c in found)
    return {
        "regime (endpoint)": end.regime,
        "retrieval (endpoint)": end.retrieval,
        "H(Z|X) / start (endpoint)": end.h_ratio,
        "format valid (endpoint)": end.format_valid,
        f"held {sustained.K} checks (first step)": "; ".join(
            f"{regime} {step}" for regime, step in sustained.held(found).items()) or "none",
        "single checks in template collapse": f"{single} of {len(found)}",
        "lowest retrieval": min(c.retrieval for c in found),
        "highest H(Z|X) / start": max(c.h_ratio for c in found),
        "lowest format valid": min(c.format_valid for c in found),
    }


def signature_caption() -> str:
    """The caption of every per-run regime table: what its columns read, and the rule."""
    return (f"Per run: its regime at the endpoint with the readings it averages, the regimes held for "
            f"{sustained.K} consecutive checks with the first step of each, how many single checks fell "
            f"in template collapse, and the extremes over the run ({sustained.rule()}; {sig.rule()})")


def noise_sentence(study: Study, runs: pd.DataFrame, what: str) -> str:
    """How many of ``runs`` (``what``, e.g. "unfiltered seeds") end in template collapse by
    the sustained rule, and one check's binomial noise at their mean endpoint retrieval."""
    ends = [end for run_id in runs["run_id"] if (end := endpoint_regime(study, run_id)) is not None]
    if not ends:
        return ""
    samples = int((runs["prompts"] * runs["group_size"]).min())
    p = sum(end.retrieval for end in ends) / len(ends)
    line = sum(end.chance for end in ends) / len(ends) + sig.RETRIEVAL_MARGIN
    collapsed = sum(end.regime == sig.TEMPLATE_COLLAPSE for end in ends)
    at_chance = sum(end.retrieval <= end.chance + sig.RETRIEVAL_MARGIN for end in ends)
    return (f"By the sustained rule {collapsed} of {len(ends)} {what} end in template collapse and "
            f"{at_chance} have an endpoint retrieval at or below chance + {sig.RETRIEVAL_MARGIN:g}; their "
            f"mean endpoint retrieval is {p:.3f} (chance + {sig.RETRIEVAL_MARGIN:g} = {line:.3f}), where "
            f"{sustained.noise(p, samples)}, so a single check below the margin decides nothing")


def signature_table(study: Study, runs: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """One row per run of ``runs`` (sorted by ``labels`` then seed): its labels and signature."""
    ordered = runs.sort_values([*labels, "seed"])
    return pd.DataFrame([{label: getattr(run, label) for label in labels} | {"seed": run.seed}
                         | signature(study, run.run_id) for run in ordered.itertuples()])


def endpoint_regime(study: Study, run_id: str) -> sig.RegimeCheck | None:
    """The run's endpoint reading and regime (the sustained rule), None without MI checks."""
    return sustained.endpoint_check(checks(study, run_id))


def count_regime(study: Study, runs: pd.DataFrame, regime: str) -> int:
    """How many of ``runs`` are in ``regime`` at their endpoint (the sustained rule)."""
    return sum((end := endpoint_regime(study, run_id)) is not None and end.regime == regime
               for run_id in runs["run_id"])


def count_modest_template_collapse(study: Study, runs: pd.DataFrame) -> int:
    """How many of ``runs`` end in template collapse with H(Z|X) at most ENTROPY_BLOWUP x
    its start there: the count had degeneration's entropy rule come first."""
    return sum((end := endpoint_regime(study, run_id)) is not None and end.regime == sig.TEMPLATE_COLLAPSE
               and end.h_ratio <= sig.ENTROPY_BLOWUP for run_id in runs["run_id"])


def degenerate_step(study: Study, run_id: str) -> float | None:
    """The first of K consecutive MI checks at which the run was in the degeneration
    regime (the sustained rule); a run that never was counts as one check interval past
    its last check (censored, so a delay is under-, not overstated). None when the run
    logged no MI checks."""
    found = checks(study, run_id)
    if not found:
        return None
    onset = sustained.held(found).get(sig.DEGENERATION)
    if onset is not None:
        return float(onset)
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
            for name in (H_COND, SUCCESS)}
    rows = []
    for run in cells.runs.sort_values([*varying, "seed"]).itertuples():
        row = {SETTINGS[key]: _shown(getattr(run, key)) for key in varying} | {"seed": run.seed}
        # retrieval and format validity at the endpoint are the signature's columns
        for name, label in ((H_COND, "H(Z|X) (end)"), (SUCCESS, "success t=0.5 (end)")):
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


def gradients_source(everything: Study) -> str:
    """How the captions name experiment ``collapse_gradients``, with its iterations."""
    runs = everything.of(GRADIENTS).runs
    steps = " or ".join(str(s) for s in sorted(runs["steps"].unique())) if len(runs) else "its"
    return f"experiment `{GRADIENTS}` (the first {steps} iterations of this regime)"


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


# A reasoning reads the state when it names a cell, as every state template of the grid
# worlds' text demonstrations does ("row R col C"), or reads a row of the picture out tile
# by tile, as every image-mode demonstration does ("ice me hole goal ."); no generic
# sentence does either (docs/warm-start.md).
NAMES_A_CELL = re.compile(r"\brow \d+ col \d+\b")
_TILES = sorted(set(frozenlake.PICTURE_WORDS.values()) | set(sokoban.PICTURE_WORDS.values()))
READS_A_ROW = re.compile(r"\b(?:(?:%s) ){3,}\." % "|".join(_TILES))
READS = "reads the state"
SAMPLE_RULE = ("chosen by rule: the samples stored at the run's endpoint checks, those its endpoint "
               "averages; a reasoning reads the state when it names a cell (\"row R col C\"), as every "
               "state template of the text demonstrations does, or reads a row of the picture out tile "
               "by tile (three or more tile words and a full stop, \"ice me hole goal .\"), as every "
               "image-mode demonstration does, and is boilerplate otherwise")


def reads_the_state(text: str) -> bool:
    """Whether a reasoning reads the state by SAMPLE_RULE."""
    return bool(NAMES_A_CELL.search(text) or READS_A_ROW.search(text))


def endpoint_samples(study: Study, run_id: str) -> pd.DataFrame | None:
    """The run's stored first-turn samples at its endpoint checks, with whether each reads
    the state (None when the results hold no rollouts for them)."""
    if study.rollouts is None:
        return None
    steps = sustained.endpoint_steps(checks(study, run_id))
    rows = study.rollouts[(study.rollouts["run_id"] == run_id) & study.rollouts["step"].isin(steps)
                          & (study.rollouts["turn"] == 0)]
    if rows.empty:
        return None
    rows = rows.sort_values(["step", "prompt_index", "sample_index"])
    return pd.DataFrame({"step": rows["step"].astype(int).to_numpy(), "prompt": rows["prompt_index"].to_numpy(),
                         READS: ["yes" if reads_the_state(str(text)) else "no" for text in rows["reasoning"]],
                         "reasoning": rows["reasoning"].to_numpy(), "action": rows["action"].to_numpy()})


def samples_at_endpoints(study: Study, runs: pd.DataFrame, labels: list[str]
                         ) -> tuple[str, list[tuple[str, pd.DataFrame]]]:
    """For ``runs``: a sentence with the share of their endpoint samples that name a cell,
    a table of that share per run, and every endpoint sample of the run with the lowest
    endpoint retrieval (ties: the first by ``labels`` and seed), each table captioned with
    the rule that chose it. The sentence is computed from the tables' samples, so the two
    cannot disagree. Empty when the results hold no such samples."""
    per_run, chosen = [], None
    for run in runs.sort_values([*labels, "seed"]).itertuples():
        samples = endpoint_samples(study, run.run_id)
        end = endpoint_regime(study, run.run_id)
        if samples is None or end is None:
            continue
        named = int((samples[READS] == "yes").sum())
        per_run.append({label: getattr(run, label) for label in labels} | {
            "seed": run.seed, "endpoint steps": ", ".join(str(s) for s in sorted(samples["step"].unique())),
            "samples": len(samples), "read the state": named, "share": named / len(samples),
            "retrieval (endpoint)": end.retrieval, "regime (endpoint)": end.regime})
        if chosen is None or end.retrieval < chosen[1].retrieval:
            chosen = (run, end, samples)
    if not per_run:
        return "", []
    table = pd.DataFrame(per_run)
    total, named = int(table["samples"].sum()), int(table["read the state"].sum())
    run, end, samples = chosen
    shown = int((samples[READS] == "yes").sum())
    who = ", ".join(f"{getattr(run, label)}" for label in labels)
    sentence = (f"Of the {total} stored first-turn samples at these runs' endpoint checks, {named} "
                f"({named / total:.0%}) read the state and {total - named} are boilerplate; "
                f"in the run shown ({who}, seed {run.seed}, the lowest endpoint retrieval), {shown} of "
                f"{len(samples)} do.")
    return sentence, [
        (f"Stored first-turn samples at the endpoint checks, per run: how many read the state ({SAMPLE_RULE})",
         table),
        (f"{who}, seed {run.seed}, the run with the lowest endpoint retrieval ({end.retrieval:.3f} at chance "
         f"{end.chance:.3f}; regime at its endpoint: {end.regime}): every stored first-turn sample at its "
         f"endpoint checks, {SAMPLE_RULE}", samples)]

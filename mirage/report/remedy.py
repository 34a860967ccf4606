"""A paired study of PAPER.md's remedy in the regime a calibration chose, with the controls
that say what top-p adds (registry experiments ``template_collapse`` and ``mechanism``).

A :class:`Design` names the experiment, how a run's arm is read from its labels, the
remedies tested against no filter and the controls the first remedy is tested against.
Its two sections: per-seed curves per arm, each run's endpoints, regime signature and
preconditions, the paired differences of every endpoint, and the **gate**: how many
unfiltered seeds hold template collapse by the sustained rule (and, where the design
asks, whether reward variance fell without a filter). A failed gate leaves both sections
without a verdict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from mirage.core.analysis import signature as sig
from mirage.report import figures, induced, preconditions, regime, sustained
from mirage.report.findings import Finding
from mirage.report.names import CHANCE, FORMAT, H_COND, RETRIEVAL, SUCCESS
from mirage.report.paired import paired
from mirage.report.results import Study
from mirage.report.summary import by_seed, endpoint, markdown_table
from mirage.report.verdicts import Check

NONE = "none"
RESCALED = "none, regulariser x"  # + the factor: no filter, the regulariser scaled down
GATE = 4  # unfiltered seeds (of 5) that must reach template collapse for the remedy to be tested
CURVES = [RETRIEVAL, H_COND, FORMAT, SUCCESS]
MI_EST = "mi/first_turn/mi_est"
CLAIM = ("Template collapse: without filtering the reasoning stops depending on the input "
         "(first-turn retrieval falls to chance) while its entropy stays high and its format "
         "valid; reward-variance filtering is the remedy: with top-p the reasoning keeps "
         "depending on the input and success is higher (PAPER.md sections 1 and 4).")
CONTROLS_CLAIM = ("Top-p helps because it keeps the groups whose reward variance carries task "
                  "signal (signal-to-noise-aware filtering), not merely because it drops "
                  "zero-variance groups or shrinks the regulariser's share (PAPER.md section 4).")


@dataclass(frozen=True)
class Design:
    """One remedy study: its experiment, sections and arms."""

    experiment: str
    key: str
    controls_key: str
    title: str
    controls_title: str
    figure: str  # the per-seed curves' file name
    arm: Callable[[Any], str]  # a run (a row of the study's runs) -> its arm, rescaled arms aside
    remedies: tuple[str, ...]  # tested against no filter; the first also against the controls
    controls: tuple[str, ...]  # tested against the first remedy, beside every rescaled arm
    retrieval_only: tuple[tuple[str, str], ...] = ()  # (a, b): a - b on retrieval alone, in the controls
    variance_gate: bool = False  # the gate also needs reward variance to fall without a filter
    seeds: int = 5  # the seeds the registry plans per arm: the gate is pending until they finish
    endpoints: tuple[str, ...] = (RETRIEVAL, H_COND, FORMAT, SUCCESS)
    differences: bool = False  # the controls also show every endpoint's paired difference (descriptive)
    # the experiment whose gradient decomposition the controls show (None: the study's own,
    # in its preconditions table)
    gradients_from: str | None = None

    @property
    def absent(self) -> str:
        return (f"The results hold no run of the registry experiment `{self.experiment}` yet; this section "
                "fills in once its runs are exported with `core report --from-store`.")

    def order(self) -> dict[str, int]:
        """Arm -> its place in tables and figures: no filter, the remedies, the controls."""
        named = [NONE, *self.remedies, *self.controls, *(a for pair in self.retrieval_only for a in pair)]
        return {arm: index for index, arm in enumerate(dict.fromkeys(named))}


@dataclass(frozen=True)
class Gate:
    """The study's runs labelled with their arm, its unfiltered runs and what the gate read."""

    runs: pd.DataFrame
    unfiltered: pd.DataFrame
    collapsed: int  # unfiltered runs in template collapse at their endpoint (the sustained rule)
    variance: str  # the sentence on reward variance without a filter ("" without the metrics)
    variance_fell: bool
    passed: bool
    pending: bool  # not passed, fewer unfiltered seeds finished than planned, and it still can pass


def arms(design: Design, runs: pd.DataFrame) -> pd.Series:
    """Each run's arm: ``design.arm``, or for an unfiltered run whose regulariser is scaled
    down from the base arm's (the largest entropy coefficient among unfiltered runs)
    "none, regulariser x<factor>"."""
    unfiltered = runs[runs["filter"] == NONE]
    base = unfiltered["entropy_coef"].max() if len(unfiltered) else 0.0

    def label(run) -> str:
        if run.filter != NONE or run.entropy_coef == base or base == 0:
            return design.arm(run)
        return f"{RESCALED}{run.entropy_coef / base:.2g}"

    return pd.Series([label(run) for run in runs.itertuples()], index=runs.index)


def unfiltered_runs(design: Design, study: Study) -> pd.DataFrame:
    """The study's runs of the unfiltered arm (not the rescaled-regulariser one)."""
    return study.runs[arms(design, study.runs) == NONE]


def gate(design: Design, study: Study) -> Gate:
    """What the gate reads from ``study`` (the design's experiment)."""
    runs = study.runs.assign(arm=arms(design, study.runs))
    unfiltered = runs[runs["arm"] == NONE]
    collapsed = regime.count_regime(study, unfiltered, sig.TEMPLATE_COLLAPSE)
    variance, change = induced.reward_variance(study, unfiltered)
    fell = change is not None and change.high < 0
    passed = collapsed >= GATE and (fell or not design.variance_gate)
    pending = not passed and len(unfiltered) < design.seeds and collapsed + design.seeds - len(unfiltered) >= GATE
    return Gate(runs, unfiltered, collapsed, variance, fell, passed, pending)


def gate_sentence(design: Design, found: Gate, study: Study) -> str:
    """The gate, as the section states it."""
    modest = regime.count_modest_template_collapse(study, found.unfiltered)
    need = f"at least {GATE} of 5 do" + (" and reward variance falls without a filter" if design.variance_gate else "")
    variance = ""
    if design.variance_gate:
        variance = f"; reward variance {'fell' if found.variance_fell else 'did not fall'} without a filter"
    state = "passed" if found.passed else "failed" if not found.pending else (
        f"is pending: {len(found.unfiltered)} of the {design.seeds} planned unfiltered seeds have finished")
    return (f"{found.collapsed} of {len(found.unfiltered)} unfiltered seeds end in the template-collapse signature "
            f"by the sustained rule ({sustained.rule()}; {sig.rule()}); {modest} of them with H(Z|X) at most "
            f"{sig.ENTROPY_BLOWUP:g} x its start there (the count had degeneration's entropy rule "
            f"come first){variance}; the comparison tests the paper's remedy only where {need}, so the gate "
            f"{state}")


def sections(design: Design, everything: Study, figure_dir: Path) -> list[Finding]:
    """The study's two sections (none when the results hold no run of it)."""
    study = everything.of(design.experiment)
    if study.runs.empty:
        return []
    found = gate(design, study)
    runs = found.runs
    names = tuple(dict.fromkeys([*design.endpoints, RETRIEVAL, SUCCESS]))
    ends = {name: endpoint(study, name).merge(runs[["run_id", "arm"]], on="run_id") for name in names}

    def compare(name: str, a: str, b: str):
        """a - b over the seeds both arms have finished (a study still running has some
        seeds in one arm only)."""
        part = ends[name]
        first, second = by_seed(part[part["arm"] == a]), by_seed(part[part["arm"] == b])
        seeds = set(first) & set(second)
        return paired({s: first[s] for s in seeds}, {s: second[s] for s in seeds})

    present = set(runs["arm"])
    text = gate_sentence(design, found, study)
    main = Finding(design.key, design.title, CLAIM)
    main.gate = None if found.passed else text
    main.gate_pending = found.pending
    main.evidence.append(text[0].upper() + text[1:] + ".")
    if (noise := regime.noise_sentence(study, found.unfiltered, "unfiltered seeds")):
        main.evidence.append(noise + ".")
    if found.variance:
        main.evidence.append(found.variance[0].upper() + found.variance[1:] + ".")
    for remedy in design.remedies:
        if {remedy, NONE} <= present:
            main.checks.append(Check(f"first-turn retrieval acc. {remedy} - {NONE}", compare(RETRIEVAL, remedy, NONE), 1))
            main.checks.append(Check(f"success {remedy} - {NONE}", compare(SUCCESS, remedy, NONE), 1))
    main.conclude(design.experiment)
    order = design.order()
    main.tables.insert(0, ("Endpoints per run (mean of the last checks)",
                           markdown_table(_endpoints(design, runs, ends, order))))
    main.tables.append((regime.signature_caption(), markdown_table(regime.signature_table(study, runs, ["arm"]))))
    main.tables.append((preconditions.caption(),
                        markdown_table(preconditions.preconditions_table(study, runs, ["arm"]))))
    sentence, samples = regime.samples_at_endpoints(study, found.unfiltered, ["arm"])
    main.tables += [(caption, markdown_table(table)) for caption, table in samples]
    if sentence:
        main.evidence.append(sentence)
    main.figure = figures.arm_seed_curves(study, runs.sort_values("arm", key=lambda c: _ranked(c, order)), "arm",
                                          CURVES, figure_dir / design.figure, chance=CHANCE)
    controls = Finding(design.controls_key, design.controls_title, CONTROLS_CLAIM)
    first = design.remedies[0]
    rescaled = sorted(arm for arm in present if arm.startswith(RESCALED))
    for other in [*design.controls, *rescaled]:
        if {first, other} <= present:
            controls.checks.append(Check(f"first-turn retrieval acc. {first} - {other}",
                                         compare(RETRIEVAL, first, other), 1))
            controls.checks.append(Check(f"success {first} - {other}", compare(SUCCESS, first, other), 1))
    for a, b in design.retrieval_only:
        if {a, b} <= present:
            controls.checks.append(Check(f"first-turn retrieval acc. {a} - {b}", compare(RETRIEVAL, a, b), 1))
    if not controls.checks:
        controls.evidence.append(f"No control arm shares a finished seed with {first} yet.")
    controls.gate, controls.gate_pending = main.gate, main.gate_pending  # the same regime
    controls.conclude(design.experiment)
    if design.differences:  # every endpoint's paired difference, beyond the checks
        pairs = [(remedy, NONE) for remedy in design.remedies]
        pairs += [(first, other) for other in [*design.controls, *rescaled]]
        table = _differences([pair for pair in pairs if set(pair) <= present], design.endpoints, compare)
        controls.tables.append((
            "Every endpoint's paired difference (a - b over the seeds both arms finished, mean and 95% t "
            "interval; descriptive: the checks above are the tested ones)", markdown_table(table)))
    base = runs[runs["arm"] == NONE]
    if design.gradients_from:
        sources = [(design.gradients_from, regime.gradients_source(everything))]
        for caption, shares in regime.pre_collapse_shares(everything, base, sources):
            controls.tables.append((caption, markdown_table(shares)))
    return [main, controls]


def _differences(pairs: list[tuple[str, str]], names: tuple[str, ...], compare) -> pd.DataFrame:
    rows = []
    for a, b in pairs:
        row = {"a - b": f"{a} - {b}"}
        for name in names:
            c = compare(name, a, b)
            row[figures.TITLES.get(name, name)] = (f"{c.mean:+.3f} [{c.low:+.3f}, {c.high:+.3f}]"
                                                   if c.n >= 2 else "n/a")
        row["seeds"] = c.n
        rows.append(row)
    return pd.DataFrame(rows)


def _ranked(column: pd.Series, order: dict[str, int]) -> pd.Series:
    return column.map(lambda arm: order.get(arm, len(order)))


def _endpoints(design: Design, runs: pd.DataFrame, ends: dict[str, pd.DataFrame],
               order: dict[str, int]) -> pd.DataFrame:
    rows = []
    ranked = runs.sort_values(["arm", "seed"], key=lambda c: _ranked(c, order) if c.name == "arm" else c)
    for run in ranked.itertuples():
        row = {"arm": run.arm, "seed": run.seed}
        for name in design.endpoints:
            values = ends[name][ends[name]["run_id"] == run.run_id]["value"]
            row[figures.TITLES.get(name, name)] = float(values.iloc[0]) if len(values) else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)

"""`core report` renders docs/reproduction.md from the committed study results, and the
results round-trip between a run store and their Parquet export."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from shared_builds import build_once, built_data

from mirage.core.store.run_store import RunStore
from mirage.report.results import (
    POWERED, STUDY_EXPERIMENTS, Study, export_study, findings_experiment, read_study, read_with_visual,
    restore_study,
)
from mirage.report.summary import LAST_CHECKS, by_seed, change, endpoint, markdown_table, over_seeds
from mirage.report.paired import detectable_factor, sd_range
from mirage.report import mechanism, regime, remedy, sustained, template
from mirage.report.findings import MIN_SPEARMAN_RUNS
from mirage.report.verdicts import (CHECK_VERDICTS, FINDING_VERDICTS, GATE_FAILED, GATE_PENDING, HOLDS,
                                    NOT_DETECTED, PARTLY, TOO_FEW)

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results" / "reproduction"
# One worker renders the page (build_once "report-docs") for this module and
# test_preconditions.py: split across workers, one waited on the other's render.
pytestmark = pytest.mark.xdist_group("report-docs")


@pytest.fixture(scope="session")
def rendered(tmp_path_factory, cli_for_fixtures) -> tuple[Path, Path, str]:
    """`core report` on the committed results, once per test run (the xdist workers share
    it: conftest's ``build_once``; read-only): the page, its figures' folder (laid out as
    docs/ lays them out) and the command's stdout."""
    def render(docs: Path) -> str:
        code, stdout, stderr = cli_for_fixtures("report", "--results", RESULTS, "--out", docs / "reproduction.md",
                                                "--figures", docs / "img" / "reproduction")
        assert code == 0, stderr
        return stdout

    docs = build_once(tmp_path_factory, "report-docs", render)
    return docs / "reproduction.md", docs / "img" / "reproduction", built_data(docs)


def _mechanism_sections() -> tuple[int, int, int]:
    """What the `mechanism` study adds once its runs are exported to results/mechanism:
    sections with a verdict, checks tables and linked figures (its two sections and their
    curves; finding 4 on both MI scales again from MIN_SPEARMAN_RUNS runs on)."""
    runs = read_with_visual(RESULTS).of(mechanism.MECHANISM).runs
    if runs.empty:
        return 0, 0, 0
    spearman = int(len(runs) >= MIN_SPEARMAN_RUNS)
    arms = set(remedy.arms(mechanism.DESIGN, runs))
    checked = int("none" in arms and bool({mechanism.MAIN, mechanism.LINEAR} & arms))
    checked += int(mechanism.MAIN in arms and (mechanism.TOP_P_ALL in arms
                                               or any(arm.startswith(remedy.RESCALED) for arm in arms)))
    return 2 + spearman, checked + spearman, 1 + spearman


def test_report_command_renders_every_finding_from_the_committed_results(rendered):
    out, figures, stdout = rendered
    text = out.read_text()
    verdicts = re.findall(r"\*\*Verdict: (.+?)\.\*\*", text)
    # 7 findings, the collapse study, the template-collapse study and its controls, the visual
    # study, finding 4 again on both MI scales over `mechanism_calibration` (results/mechanism),
    # and what the mechanism study adds once exported
    sections, _, figures_added = _mechanism_sections()
    assert len(verdicts) == 12 + sections and set(verdicts) <= set(FINDING_VERDICTS)
    assert "## How to read the verdicts" in text and "paired by seed" in text
    assert f"last K = {LAST_CHECKS} checks" in text
    assert "## Delayed degeneration, not template collapse (experiment `collapse`)" in text
    assert "## Finding the collapse regime (experiment `collapse_calibration`)" in text
    assert stdout.count("finding ") == 12 + sections
    assert "## Template collapse and top-p (experiment `template_collapse`)" in text
    assert "## Looking for template collapse (experiment `template_calibration`)" in text
    section = text[text.index("## Reasoning regime per run (experiment `reproduction_powered`)"):]
    assert section.count("| diverse 0") >= 1 and sum(line.startswith("| ") for line in
                                                      section.split("\n\n")[2].splitlines()) == 1 + 65  # header + runs
    linked = re.findall(r"!\[[^\]]*\]\(img/reproduction/([^)]+)\)", text)
    assert len(linked) == 10 + figures_added and all((figures / name).stat().st_size > 1000 for name in linked)
    committed = read_study(RESULTS)
    assert findings_experiment(committed.runs) == POWERED  # the powered re-run is committed
    study = committed.of(POWERED)
    assert f"{len(study.runs)} runs" in text
    assert set(study.runs.groupby(["env", "filter", "slip", "regime"]).size()) == {5}  # 5 seeds each
    reading = text.split("## How to read the verdicts")[1].split("\n## ")[0]
    assert "bootstrap" not in reading and "95% CI (bootstrap)" not in text
    assert "Holm" in reading and "noncentral t" in reading and "chi-square" in reading
    low, high = sd_range(5)
    assert (f"With 5 seeds the factor is {detectable_factor(5):.2f} and the sd's interval is "
            f"{low:.2f}-{high:.2f} x the estimate") in reading
    _assert_checks_follow_the_holm_rule(text)


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row, split at bars that are not escaped."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def _assert_checks_follow_the_holm_rule(text: str) -> None:
    """In every checks table a verdict other than not detected needs Holm p < 0.05, and
    the Holm p is never below the raw p."""
    tables = [block for block in text.split("\n\n") if block.startswith("| check |")]
    assert len(tables) == 12 + _mechanism_sections()[1]  # one per finding with checks
    for table in tables:
        lines = table.splitlines()
        header = _cells(lines[0])
        assert header[header.index("p") + 1] == "p (Holm)"
        for line in lines[2:]:
            cells = _cells(line)  # a label such as "H(Z|X) ..." has its bar escaped
            assert len(cells) == len(header), line
            row = dict(zip(header, cells))
            assert row["verdict"] in CHECK_VERDICTS
            if row["verdict"] == TOO_FEW:
                continue
            raw, adjusted = float(row["p"]), float(row["p (Holm)"])
            assert adjusted >= raw
            if adjusted >= 0.05:
                assert row["verdict"] == NOT_DETECTED, row
            if "detectable (80%)" in row:
                assert re.fullmatch(r"\d+\.\d{3} \(\d+\.\d{3}-\d+\.\d{3}\)", row["detectable (80%)"]), row


def _verdict_table(text: str) -> dict[str, str]:
    """Finding key -> verdict, from the page's verdict table."""
    table = text.split("## Verdicts\n\n")[1].split("\n\n")[0].splitlines()[2:]
    return {cells[0]: cells[-1] for cells in map(_cells, table)}


def test_no_verdict_above_what_its_gate_allows(rendered):
    """The verdict table against the gates, recomputed from the committed results: a study
    whose gate failed (fewer than GATE unfiltered seeds ending in template collapse by the
    sustained rule; for `mechanism` also reward variance not falling) shows "gate failed:
    no verdict" for both of its sections ("gate pending: no verdict" while its study runs
    and the gate can still pass), never "holds" or "holds partly"; the top line and the
    section say the same count."""
    text = rendered[0].read_text()
    verdicts = _verdict_table(text)
    top = text.split("## How to read the verdicts")[0]
    gated = []
    for module in (template, mechanism):
        study = read_with_visual(RESULTS).of(module.DESIGN.experiment)
        if study.runs.empty:
            assert module.KEY not in verdicts and module.ABSENT in text
            continue
        found = remedy.gate(module.DESIGN, study)
        assert found.collapsed == regime.count_regime(study, module.unfiltered_runs(study), "template collapse")
        keys = (module.KEY, module.CONTROLS_KEY)
        expected = None if found.passed else GATE_PENDING if found.pending else GATE_FAILED
        for key in keys:
            assert (verdicts[key] == expected) if expected else verdicts[key] not in (GATE_FAILED, GATE_PENDING), (
                key, verdicts[key])
        if not found.passed:
            assert {HOLDS, PARTLY}.isdisjoint({verdicts[key] for key in keys})
            gated += keys
        counted = f"{found.collapsed} of {len(found.unfiltered)} unfiltered seeds end in"
        assert (f"{counted} it by the sustained rule" in top
                or f"{counted} template collapse by the sustained rule" in top)
        section = text.split(f"## {module.TITLE}")[1].split("\n## ")[0]
        assert f"{counted} the template-collapse signature" in section
    # every gate-free section's verdict follows from its checks alone
    assert set(verdicts.values()) <= set(FINDING_VERDICTS)
    assert sorted(key for key, verdict in verdicts.items() if verdict in (GATE_FAILED, GATE_PENDING)) == sorted(gated)


def test_the_page_reads_regimes_by_the_sustained_rule_everywhere(rendered):
    """The rule is stated once in "How to read the verdicts" with one check's noise, every
    per-run regime table carries it, each checks table names its experiment's one family,
    and the top line says how each regime was induced and whether reward variance fell."""
    text = rendered[0].read_text()
    reading = text.split("## How to read the verdicts")[1].split("\n## ")[0]
    assert sustained.rule() in reading and "binomial sd sqrt(p(1-p)/n)" in reading and "n = 128" in reading
    assert "one Holm family per registry experiment" in reading and GATE_FAILED in reading
    assert "| regimes (first step) |" not in text and "| template collapse at |" not in text  # single-check columns
    captions = re.findall(r"\*(Per run: its regime at the endpoint[^*]*)\*", text)
    assert len(captions) >= 3 and all(sustained.rule() in caption for caption in captions)
    families = re.findall(r"Holm-adjusted over every check of experiment `([a-z_]+)` \(one family of (\d+)\)", text)
    assert len(families) == 12 + _mechanism_sections()[1]  # one checks table per finding with checks
    sizes = {}
    for experiment, size in families:
        assert sizes.setdefault(experiment, size) == size  # one family, one size per experiment
    assert sizes["template_collapse"] == "7"
    top = text.split("## How to read the verdicts")[0]
    assert top.count("induced by ") >= 3 and top.count("reward variance ") >= 3
    assert "an entropy bonus 0.3, a KL term 3 towards a reference fine-tuned to reason in input-agnostic" in top


def test_the_notes_quote_no_measured_number():
    """Every measured value on the page is computed by `core report`; the researcher's
    readings name settings (coefficients, seeds) but quote no measurement that could drift
    from the results: no number with two or more decimals, no percentage, no "Nx" factor."""
    notes = (REPO / "results" / "reproduction.notes.yaml").read_text()
    assert not re.findall(r"\d\.\d\d|\d+ ?%|\b\d+(\.\d+)?x\b", notes)


def test_committed_report_is_what_the_command_renders(rendered):
    """docs/reproduction.md is regenerated, not edited: rendering again gives the same text."""
    out, _, _ = rendered
    assert out.read_text() == (REPO / "docs" / "reproduction.md").read_text()


def test_results_round_trip_through_a_store(tmp_path):
    restored = restore_study(RESULTS, tmp_path / "study.duckdb")
    runs = RunStore(restored).list_runs()
    assert len(runs) == len(read_study(RESULTS).runs)
    assert {r["status"] for r in runs} == {"finished"}
    again = tmp_path / "again"
    counts = export_study(restored, again, STUDY_EXPERIMENTS)
    assert {name: count for name, count in counts.items() if count} == dict(
        read_study(RESULTS).runs.groupby("experiment").size().items())
    before = pd.read_parquet(RESULTS / "metrics.parquet").sort_values(["run_id", "step", "name"])
    after = pd.read_parquet(again / "metrics.parquet").sort_values(["run_id", "step", "name"])
    pd.testing.assert_frame_equal(before.reset_index(drop=True), after.reset_index(drop=True))
    with pytest.raises(FileExistsError):
        restore_study(RESULTS, restored)


def test_export_refuses_a_store_without_the_experiment(tmp_path):
    store = tmp_path / "empty.duckdb"
    RunStore(store)
    with pytest.raises(ValueError, match="no finished run of experiment 'reproduction'"):
        export_study(store, tmp_path / "out")


def test_report_without_results_exits_2_naming_the_folder(tmp_path, cli):
    code, _, stderr = cli("report", "--results", tmp_path / "nothing", "--out", tmp_path / "r.md")
    assert code == 2 and "holds no exported study" in stderr and "nothing" in stderr


def test_endpoint_is_the_mean_of_the_last_checks_after_the_warm_start():
    runs = pd.DataFrame({"run_id": ["a", "b"], "seed": [0, 1]})
    steps = [0, 1, 5, 10, 15, 20]
    metrics = pd.DataFrame({"run_id": ["a"] * 6 + ["b"] * 2, "step": steps + [0, 10],
                            "name": "m", "value": [9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 6.0]})
    study = Study(runs, metrics)
    ends = endpoint(study, "m", last=3).set_index("run_id")["value"]
    assert ends.to_dict() == {"a": 4.0, "b": 6.0}  # mean of 3, 4, 5; b has one check after 0
    moved = change(study, "m", last=3).set_index("run_id")
    assert moved.loc["a", "start"] == 9.0 and moved.loc["a", "change"] == -5.0
    assert by_seed(endpoint(study, "m")) == {0: 4.0, 1: 6.0}
    with pytest.raises(ValueError, match="several runs per seed"):
        by_seed(pd.DataFrame({"seed": [0, 0], "value": [1.0, 2.0]}))


def test_summaries_on_hand_checked_cases():
    table = over_seeds(pd.DataFrame({"f": ["a", "a", "b"], "value": [1.0, 3.0, 2.0]}), ["f"])
    assert table.to_dict("records")[0] == {"f": "a", "mean": 2.0, "low": 1.0, "high": 3.0,
                                           "seeds": 2, "spread": 2.0}
    assert markdown_table(pd.DataFrame({"x": [0.12345], "y": ["s"]})) == "| x | y |\n|---|---|\n| 0.123 | s |"
    # a bar inside a cell, as in H(Z|X), is escaped instead of splitting the cell
    assert markdown_table(pd.DataFrame({"H(Z|X)": ["Up || Up"]})) == "| H(Z\\|X) |\n|---|\n| Up \\|\\| Up |"


@pytest.mark.slow  # a second full render (about 8 s); the fast tier renders the committed results once
def test_findings_use_the_powered_rerun_once_the_results_hold_it(tmp_path, cli):
    """With runs of `reproduction_powered` in the results, every finding is measured on
    them alone and the page says so, but the provoked regime, which the powered study does
    not run, on `reproduction`'s runs; without them, on `reproduction` (the tests above)."""
    powered = tmp_path / "results"
    powered.mkdir()
    for table in RESULTS.glob("*.parquet"):
        (powered / table.name).write_bytes(table.read_bytes())
    runs = pd.read_parquet(RESULTS / "runs.parquet")
    runs = runs[runs["experiment"] != POWERED].reset_index(drop=True)  # as before the re-run landed
    first = runs["experiment"] == "reproduction"
    labels = read_study(RESULTS).of("reproduction").runs
    # whole seeds (arms stay paired), without the provoked regime, as in the powered study
    seeds_0_1 = labels.loc[labels["seed"].isin([0, 1]) & (labels["regime"] != "provoked"), "run_id"]
    relabelled = runs[runs["run_id"].isin(seeds_0_1)]
    runs.loc[runs["run_id"].isin(relabelled["run_id"]), "experiment"] = "reproduction_powered"
    runs.to_parquet(powered / "runs.parquet")
    out = tmp_path / "reproduction.md"
    code, _, stderr = cli("report", "--results", powered, "--out", out, "--figures", tmp_path / "img")
    assert code == 0, stderr
    text = out.read_text()
    assert "The registry experiment `reproduction_powered` (registry.yaml)" in text
    assert f"{len(relabelled)} runs:" in text
    assert f"{int(first.sum())} runs:" not in text
    provoked = text.split("## Provoking template collapse")[1].split("\n## ")[0]
    assert "Measured on the first study, `reproduction`" in provoked
    assert "| none | retrieval acc. |" in provoked  # its table, from the first study's runs
    assert findings_experiment(read_study(powered).runs) == "reproduction_powered"
    before = pd.read_parquet(RESULTS / "runs.parquet")
    assert findings_experiment(before[before["experiment"] != POWERED]) == "reproduction"

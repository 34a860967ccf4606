"""Finding 4 measured again on a study run since #46 (issue #46 point 4): its runs carry
MI on both per-token scales, so the Spearman table shows the reference code's scale beside
MIRAGE's; a study without them, or with too few runs, gets no such section."""

from __future__ import annotations

import pandas as pd

from mirage.report.conventions import REFERENCE_SCALE
from mirage.report.findings import MIN_SPEARMAN_RUNS, spearman_on_both_scales
from mirage.report.names import SUCCESS
from mirage.report.results import Study

RUNS = 8


def _study(experiment: str, both_scales: bool, runs: int = RUNS) -> Study:
    """Runs whose final success rises with the run index; the default scale's trajectory
    MI-ZScore rises with it, the reference scale's falls (so the two rows differ in sign)."""
    labels = pd.DataFrame([{"run_id": f"r{i}", "experiment": experiment, "env": "frozenlake",
                            "seed": i, "filter": "none"} for i in range(runs)])
    rows = []
    for i in range(runs):
        for step in range(0, 21, 5):
            rows += [(f"r{i}", step, "mi/trajectory/mi_zscore", 1.0 + i),
                     (f"r{i}", step, "mi/first_turn/policy_entropy", 0.5)]
            if both_scales:
                rows += [(f"r{i}", step, name, 10.0 - i) for name in REFERENCE_SCALE]
        rows += [(f"r{i}", step, SUCCESS, 0.1 * i) for step in (0, 10, 20)]
    return Study(labels, pd.DataFrame(rows, columns=["run_id", "step", "name", "value"]))


def test_a_later_study_with_both_scales_gets_finding_4_on_both(tmp_path):
    [finding] = spearman_on_both_scales(_study("mechanism", True), ("mechanism",), tmp_path)
    assert finding.key == "4 on `mechanism`" and finding.title.endswith("on both MI scales")
    caption, table = finding.tables[0]
    assert "RAGEN scale" in caption
    assert "| frozenlake | trajectory MI-ZScore | 1.000 |" in table
    assert "| frozenlake | trajectory MI-ZScore (RAGEN scale) | -1.000 |" in table
    labels = [check.label for check in finding.checks]
    assert "frozenlake: Spearman(trajectory MI-ZScore on RAGEN's scale, success)" in labels
    assert finding.experiment == "mechanism"  # its own Holm family
    assert (tmp_path / "finding4_spearman_mechanism.png").exists()


def test_no_section_without_both_scales_or_with_too_few_runs(tmp_path):
    assert spearman_on_both_scales(_study("mechanism", False), ("mechanism",), tmp_path) == []
    few = _study("mechanism", True, runs=MIN_SPEARMAN_RUNS - 1)
    assert spearman_on_both_scales(few, ("mechanism",), tmp_path) == []
    assert spearman_on_both_scales(_study("other", True), ("mechanism",), tmp_path) == []

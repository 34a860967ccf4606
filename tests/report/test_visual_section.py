"""The visual study's section (issue #42) from the committed results: text beside image
for each environment, each filtered arm paired with no filter by seed, one Holm family
for the experiment, and every run's regime."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from mirage.report import visual
from mirage.report.findings import adjust_families
from mirage.report.results import BESIDE, VISUAL, read_study, read_with_visual, run_labels

RESULTS = Path(__file__).resolve().parents[2] / "results" / "reproduction"


@pytest.fixture(scope="module")
def section():
    everything = read_with_visual(RESULTS)
    [finding] = visual.visual_study(everything)
    return everything, finding


def test_the_visual_runs_are_read_beside_the_study():
    alone, both = read_study(RESULTS), read_with_visual(RESULTS)
    beside = RESULTS.parent
    added = both.runs[both.runs["experiment"] == VISUAL]
    assert len(added) == len(read_study(beside / VISUAL).runs) > 0
    assert len(both.runs) - len(alone.runs) == sum(len(read_study(beside / folder).runs) for folder in BESIDE)
    assert set(added["observation"]) == {"image", "text"}


def test_each_environment_shows_text_beside_image(section):
    _, finding = section
    caption, table = finding.tables[0]
    assert caption.startswith("Text beside image")
    for env in ("sokoban", "frozenlake"):
        for observation in ("image", "text"):
            assert f"| {env} | {observation} | top-p 0.9, main table |" in table
    assert "| +59.5 |" in table and "| +6.0 |" in table  # RAGEN-2's rows beside


def test_the_checks_pair_each_arm_with_no_filter_and_form_one_family(section):
    _, finding = section
    labels = [check.label for check in finding.checks]
    assert "success sokoban image: top-p 0.9, linear - none" in labels
    assert "success frozenlake text: top-p 0.9, main table - none" in labels
    assert all(check.direction == 1 for check in finding.checks)
    assert finding.experiment == VISUAL
    adjust_families([finding])
    assert all(check.p_adjusted >= check.comparison.p_value for check in finding.checks)
    assert any(line.startswith("Against RAGEN-2's table") for line in finding.evidence)


def test_every_run_has_its_regime_row(section):
    everything, finding = section
    runs = everything.of(VISUAL).runs
    regimes = finding.tables[-1][1]
    assert regimes.count("\n| ") == len(runs)  # one row per run below the header


def test_the_arm_is_read_from_the_filters_mode():
    base = {"env": {"name": "sokoban", "options": {"observation": "image"}},
            "algorithm": {"lr": 1e-3, "entropy_coef": 0.0, "name": "grpo"}, "model": {}, "seed": 0,
            "steps": 1, "rollout": {"prompts": 2, "group_size": 2}, "validation": {"episodes": 2}}
    labels = [run_labels(base | {"filter": f}) for f in (
        {"name": "none"}, {"name": "top_p", "rho": 0.9},
        {"name": "top_p", "rho": 0.9, "options": {"mode": "softmax"}, "score": "std", "include_zero": True})]
    runs = pd.DataFrame(labels)
    assert [visual.arm(run) for run in runs.itertuples()] == [visual.NONE, visual.LINEAR, visual.MAIN]
    assert list(runs["observation"]) == ["image"] * 3

"""The mechanism's preconditions per run (mirage/report/preconditions.py) on hand-made runs
whose answer is known, the reward variance's per-step mean and std derived from stored
per-group rows (mirage/report/results.py), and on the committed results: every section
of docs/reproduction.md with a signature table has a preconditions table beside it."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from shared_builds import build_once

from mirage.report import preconditions
from mirage.report.induced import MIXED, ZERO_VARIANCE
from mirage.report.names import RETRIEVAL
from mirage.report.results import VARIANCE_MEAN, VARIANCE_STD, Study, with_reward_variance

RESULTS = Path(__file__).resolve().parents[2] / "results" / "reproduction"
# One worker renders the page (build_once "report-docs") for this module and
# test_report.py: split across workers, one waited on the other's render.
pytestmark = pytest.mark.xdist_group("report-docs")
STEPS = 60


def _run(run_id: str, rv_from: int | None, mi_from: int | None, success_from: int | None,
         grad: bool = False) -> list[tuple]:
    """Metric rows of a 60-step run of 8 prompts whose reward variance, first-turn
    retrieval and training success halve from the given step on (never when None)."""
    def level(start: float, fall_from: int | None, step: int) -> float:
        return start / 2 if fall_from is not None and step >= fall_from else start

    rows = []
    for step in range(STEPS + 1):
        rows += [(run_id, step, VARIANCE_MEAN, level(4.0, rv_from, step)),
                 (run_id, step, VARIANCE_STD, 1.0),
                 (run_id, step, ZERO_VARIANCE, 2.0 if step <= 30 else 6.0),
                 (run_id, step, MIXED, 0.5),
                 (run_id, step, preconditions.TRAIN_SUCCESS, level(0.8, success_from, step))]
        if grad and step >= 1:  # clipping fires on every 4th update (norm 1.5 against max 1.0)
            rows.append((run_id, step, preconditions.GRAD_NORM, 1.5 if step % 4 == 0 else 0.5))
        if step in (0, 1) or step % 5 == 0:
            rows.append((run_id, step, RETRIEVAL, level(0.9, mi_from, step)))
        if grad and step % 20 == 0:  # the regulariser is 3 of 4 in q1, 1 of 4 in q6
            for bucket, task, entropy in (("q1", 1.0, 3.0), ("q6", 3.0, 1.0), ("all", 1.0, 1.0)):
                rows += [(run_id, step, f"grad/{bucket}/task/total", task),
                         (run_id, step, f"grad/{bucket}/entropy/total", entropy),
                         (run_id, step, f"grad/{bucket}/kl/total", 0.0)]
    return rows


def _study(*runs: tuple[str, list[tuple]]) -> Study:
    labels = pd.DataFrame([{"run_id": run_id, "experiment": "e", "filter": "none", "seed": seed, "prompts": 8,
                            "max_grad_norm": 1.0}
                           for seed, (run_id, _) in enumerate(runs)])
    rows = [row for _, metric_rows in runs for row in metric_rows]
    return Study(labels, pd.DataFrame(rows, columns=["run_id", "step", "name", "value"]))


def test_reward_variance_falls_before_mi_before_success():
    """RV halves from step 6 (so the block of steps 6-10 is the first low reading), MI
    from its check at step 20, success from step 26 (the block 26-30)."""
    study = _study(("a", _run("a", rv_from=6, mi_from=20, success_from=26, grad=True)))
    row = preconditions.preconditions_table(study, study.runs, ["filter"]).iloc[0]
    assert (row["RV fell at"], row["retrieval fell at"], row["success fell at"]) == (10, 20, 30)
    assert row[preconditions.ORDER] == "yes"
    assert row["zero-variance share"] == "0.25 -> 0.75"  # 2 of 8 groups in steps 1-10, 6 of 8 in 51-60
    assert row["mixed share"] == "0.50 -> 0.50"
    assert row["RV mean"] == "3.00 -> 2.00" and row["RV std"] == "1.00 -> 1.00"  # steps 1-5 at 4, 6-10 at 2
    assert row["regulariser share of the gradient"] == "q1 0.75, q6 0.25, all 0.50 (4 checks, steps 0-60)"
    assert row[preconditions.CLIPPED] == "0.25 of 60"


def test_a_signal_that_never_falls_makes_the_order_not_applicable():
    study = _study(("b", _run("b", rv_from=None, mi_from=20, success_from=None)),
                   ("c", _run("c", rv_from=30, mi_from=10, success_from=40)))
    table = preconditions.preconditions_table(study, study.runs, ["filter"]).set_index("seed")
    assert table.loc[0, "RV fell at"] == "never" and table.loc[0, "success fell at"] == "never"
    assert table.loc[0, preconditions.ORDER] == "n/a (reward variance, success never fell)"
    assert table.loc[0, "regulariser share of the gradient"] == preconditions.NOT_STORED
    assert table.loc[0, preconditions.CLIPPED] == preconditions.NOT_STORED
    assert table.loc[1, preconditions.ORDER] == "no"  # MI (10) fell before reward variance (30)


def test_a_fall_counts_only_when_sustained_for_k_readings():
    # readings at steps 5..30: the start 1.0, a dip at 10 and 20 only, then low from 25 on
    values = pd.Series([1.0, 0.5, 1.0, 0.5, 1.0, 0.5, 0.5, 0.5], index=[5, 10, 15, 20, 25, 30, 35, 40])
    assert preconditions.fell_at(values) == 30
    assert preconditions.fell_at(values, k=1) == 10
    assert preconditions.fell_at(pd.Series([0.0, 0.0, 0.0, 0.0], index=[5, 10, 15, 20])) is None  # no start
    # 0.85 of the start is not below (1 - 0.2) x it
    assert preconditions.fell_at(pd.Series([1.0, 0.85, 0.85, 0.85], index=[5, 10, 15, 20])) is None


def test_readings_close_every_five_steps():
    per_step = pd.DataFrame({"step": range(0, 11), "value": [9.0] + [1.0] * 5 + [3.0] * 5})
    assert preconditions.readings(per_step, per_step=True).to_dict() == {5: 1.0, 10: 3.0}  # step 0 left out
    checks = pd.DataFrame({"step": [0, 1, 5, 10, 15], "value": [9.0, 0.8, 0.6, 0.5, 0.4]})
    assert preconditions.readings(checks, per_step=False).to_dict() == pytest.approx({5: 0.7, 10: 0.5, 15: 0.4})


def test_reward_variance_per_step_is_derived_from_the_group_rows_where_not_logged():
    groups = pd.DataFrame({"run_id": ["old"] * 4 + ["new"] * 2, "step": [1, 1, 1, 1, 1, 1],
                           "reward_variance": [0.0, 0.0, 0.5, 0.5, 9.0, 9.0]})
    logged = pd.DataFrame([("new", 1, VARIANCE_MEAN, 1.0), ("new", 1, VARIANCE_STD, 0.0)],
                          columns=["run_id", "step", "name", "value"])
    metrics = with_reward_variance(logged, groups).set_index(["run_id", "name"])["value"]
    assert metrics[("old", VARIANCE_MEAN)] == pytest.approx(0.25)
    assert metrics[("old", VARIANCE_STD)] == pytest.approx(0.25)  # population std, as the run loop logs it
    assert metrics[("new", VARIANCE_MEAN)] == 1.0  # a run that logged them keeps its own


@pytest.fixture(scope="module")
def page(tmp_path_factory, cli_for_fixtures) -> str:
    """`core report` on the committed results (shared with tests/report/test_report.py's
    render: the same build, once per test run)."""
    def render(docs: Path) -> str:
        code, stdout, stderr = cli_for_fixtures("report", "--results", RESULTS, "--out", docs / "reproduction.md",
                                                "--figures", docs / "img" / "reproduction")
        assert code == 0, stderr
        return stdout

    return (build_once(tmp_path_factory, "report-docs", render) / "reproduction.md").read_text()


def test_every_section_with_a_signature_table_has_a_preconditions_table(page):
    sections = re.split(r"\n(?=## )", page)
    with_signature = [s for s in sections if re.search(r"^\|.*\| regime \(endpoint\) \|", s, re.M)]
    titles = [s.splitlines()[0] for s in with_signature]
    assert len(with_signature) >= 8, titles  # the powered study, collapse, template, visual, 4 calibrations
    for section in with_signature:
        title = section.splitlines()[0]
        preconditions_header = re.search(rf"^\|.*\| {re.escape(preconditions.ORDER)} \|", section, re.M)
        assert preconditions_header, f"no preconditions table in {title}"
        signature_header = re.search(r"^\|.*\| regime \(endpoint\) \|", section, re.M)
        assert _rows(section, preconditions_header) == _rows(section, signature_header) > 0, title


def _rows(section: str, header: re.Match) -> int:
    """The rows of the Markdown table whose header ``header`` matched (to the blank line)."""
    lines = section[header.start():].split("\n\n", 1)[0].splitlines()
    return len(lines) - 2  # the header and the rule under it

"""The sustained rule (mirage/report/sustained.py), one Holm family per experiment
(findings.adjust_families), the samples chosen at a run's endpoint checks and whether
reward variance fell (mirage/report/induced.py), on hand-checked cases."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from mirage.core.analysis import signature as sig
from mirage.report import induced, regime, sustained
from mirage.report.findings import Finding, adjust_families
from mirage.report.paired import Paired, holm
from mirage.report.results import Study
from mirage.report.verdicts import GATE_FAILED, HOLDS, NOT_DETECTED, Check, finding_verdict


def _check(step: int, retrieval: float, h_ratio: float = 1.0, valid: float = 1.0) -> sig.RegimeCheck:
    return sig.RegimeCheck(step, retrieval, 0.125, h_ratio, valid, sig.classify(retrieval, 0.125, h_ratio, valid))


def test_endpoint_is_the_mean_of_the_last_three_checks_after_the_warm_start():
    checks = [_check(0, 0.9), _check(1, 0.8), _check(5, 0.20), _check(10, 0.24), _check(15, 0.25)]
    end = sustained.endpoint_check(checks)
    assert end.step == 15 and end.retrieval == pytest.approx(0.23)
    assert end.regime == sig.DIVERSE  # 0.23 > chance + 0.1 though one check was below it
    assert sustained.endpoint_steps(checks) == [5, 10, 15]
    assert sustained.endpoint_check([_check(0, 0.9)]) is None  # only the warm start


def test_a_regime_is_entered_at_the_first_of_three_consecutive_checks():
    checks = [_check(0, 0.9), _check(5, 0.2), _check(10, 0.9), _check(15, 0.2), _check(20, 0.2),
              _check(25, 0.2), _check(30, 0.9)]
    assert sustained.held(checks) == {sig.TEMPLATE_COLLAPSE: 15}
    assert sustained.held(checks, k=1) == {sig.DIVERSE: 0, sig.TEMPLATE_COLLAPSE: 5}


def test_one_checks_binomial_noise():
    # 128 samples at p = 0.25: sqrt(0.25 * 0.75 / 128) = 0.0383, 38% of the 0.1 margin
    assert sustained.retrieval_sd(0.25, 128) == pytest.approx(math.sqrt(0.1875 / 128))
    assert "n = 128" in sustained.noise(0.25, 128) and "0.038" in sustained.noise(0.25, 128)
    assert "38% of the 0.1 margin" in sustained.noise(0.25, 128)


def _paired(p_value: float, low: float = 0.1) -> Paired:
    return Paired(5, 0.2, 0.1, low, 0.3, p_value, 2.0, 0.1, 0.05, 0.3)


def test_one_holm_family_per_experiment():
    """Two findings of one experiment share a family (here of 3): a check that holds in a
    family of its own is not detected in the larger one; another experiment's checks are
    not in it."""
    first = Finding("a", "A", "claim", checks=[Check("x", _paired(0.02), 1)])
    second = Finding("b", "B", "claim", checks=[Check("y", _paired(0.01), 1), Check("z", _paired(0.5), 1)])
    other = Finding("c", "C", "claim", checks=[Check("w", _paired(0.02), 1)])
    first.conclude("study")
    second.conclude("study")
    other.conclude("elsewhere")
    assert first.verdict == HOLDS  # alone: Holm p 0.02
    adjust_families([first, second, other])
    family = holm([0.02, 0.01, 0.5])  # 0.04, 0.03, 0.5
    assert [c.p_adjusted for c in first.checks + second.checks] == pytest.approx(family)
    assert first.verdict == HOLDS and second.verdict == "holds partly"
    assert other.checks[0].p_adjusted == pytest.approx(0.02) and other.verdict == HOLDS
    # the evidence and the table are redrawn in place, naming the family and its size
    assert sum("x: " in sentence for sentence in first.evidence) == 1 and "(Holm 0.04)" in first.evidence[0]
    caption = [caption for caption, _ in second.tables if caption.startswith("Checks")]
    assert caption == ["Checks: each a paired difference across seeds (or a rank correlation over runs), its "
                       "95% interval and its p value, raw and Holm-adjusted over every check of experiment "
                       "`study` (one family of 3)"]
    lone = Finding("d", "D", "claim", checks=[Check("v", _paired(0.03), 1), Check("u", _paired(0.03), 1)])
    lone.conclude("study")
    adjust_families([first, second, lone])  # 5 checks: 0.01 x 5 = 0.05 is not below alpha
    assert lone.verdict == NOT_DETECTED and second.checks[0].p_adjusted == pytest.approx(0.05)


def test_a_failed_gate_has_no_verdict_whatever_the_checks_show():
    holds = Check("x", _paired(0.001), 1)
    assert finding_verdict([holds], gate_passed=False) == GATE_FAILED
    finding = Finding("a", "A", "claim", checks=[holds], gate="0 of 5 unfiltered seeds ...")
    finding.conclude("study")
    assert finding.checks[0].verdict == HOLDS and finding.verdict == GATE_FAILED
    adjust_families([finding])
    assert finding.verdict == GATE_FAILED


def _study(rows: list[tuple[str, int, str, float]], rollouts: pd.DataFrame | None = None) -> Study:
    runs = pd.DataFrame({"run_id": ["r0", "r1"], "seed": [0, 1], "filter": "none", "prompts": 8,
                         "group_size": 16, "experiment": "x"})
    metrics = pd.DataFrame(rows, columns=["run_id", "step", "name", "value"])
    return Study(runs, metrics, rollouts)


def test_samples_are_the_endpoint_checks_and_the_sentence_counts_them():
    rows = []
    for run_id, floor in (("r0", 0.3), ("r1", 0.2)):
        for step in (0, 5, 10, 15, 20):
            for name, value in (("retrieval_acc", 0.9 if step == 0 else floor), ("retrieval_chance", 0.125),
                                ("h_cond", 1.0), ("format_valid", 1.0)):
                rows.append((run_id, step, f"mi/first_turn/{name}", value))
    texts = {"r0": ["I am at row 1 col 2 ; the goal is at row 3 col 3 .", "Stay calm ."],
             "r1": ["Stay calm .", "Think before every step ."]}
    rollouts = pd.DataFrame([{"run_id": run_id, "step": step, "prompt_index": i, "sample_index": 0, "turn": 0,
                              "reasoning": text, "action": "Up"}
                             for run_id, pair in texts.items() for step in (0, 5, 10, 15, 20)
                             for i, text in enumerate(pair)])
    study = _study(rows, rollouts)
    sentence, tables = regime.samples_at_endpoints(study, study.runs, ["filter"])
    per_run, shown = tables[0][1], tables[1][1]
    assert list(per_run["endpoint steps"]) == ["10, 15, 20"] * 2  # not the warm start, not step 5
    assert list(per_run["read the state"]) == [3, 0] and list(per_run["samples"]) == [6, 6]
    # the run shown is the lowest endpoint retrieval's (r1), and the sentence counts its samples
    assert "none, seed 1, the run with the lowest endpoint retrieval" in tables[1][0]
    assert set(shown["step"]) == {10, 15, 20} and (shown["reads the state"] == "no").all()
    assert sentence.startswith("Of the 12 stored first-turn samples at these runs' endpoint checks, "
                               "3 (25%) read the state and 9 are boilerplate")
    assert sentence.endswith("0 of 6 do.")


def test_reward_variance_falls_when_the_paired_interval_of_its_std_is_below_zero():
    rows = []
    for run_id, drop in (("r0", 0.10), ("r1", 0.101)):
        for step in range(0, 31):
            late = step > 20
            rows += [(run_id, step, induced.STD, 0.3 - (drop if late else 0.0)),
                     (run_id, step, induced.ZERO_VARIANCE, 6.0 if late else 2.0),
                     (run_id, step, induced.MIXED, 0.25 if late else 0.75)]
    study = _study(rows)
    sentence, change = induced.reward_variance(study, study.runs)
    assert change.mean == pytest.approx(-0.1005) and change.high < 0
    assert sentence.startswith("reward variance fell without a filter (first 10 vs last 10 iterations")
    assert "the zero-variance share of groups 0.25 -> 0.75" in sentence  # 2 / 8 -> 6 / 8
    assert "the mixed share 0.75 -> 0.25" in sentence
    flat = _study([(run_id, step, induced.STD, 0.3 + 0.01 * (run_id == "r1") * (step % 2))
                   for run_id in ("r0", "r1") for step in range(1, 31)])
    assert induced.reward_variance(flat, flat.runs)[0].startswith("reward variance did not detectably fall")


def test_induced_by_reads_the_stored_settings():
    runs = pd.DataFrame([{"entropy_coef": 0.3, "kl_coef": 3.0, "reference": "generic_share=1.0",
                          "lr": 5e-5, "env_options": "generic_style=grammar", "steps": 60}])
    text = induced.induced_by(runs)
    assert text.startswith("an entropy bonus 0.3, a KL term 3 towards a reference fine-tuned to reason in "
                           "input-agnostic boilerplate (demonstrations with generic_share=1.0")
    assert text.endswith("the default lr 5e-05, a warm start on demonstrations with generic_style=grammar, "
                         "60 iterations")
    runs = runs.assign(entropy_coef=0.0, kl_coef=0.0, lr=1e-3, env_options="")
    assert induced.induced_by(runs) == "no entropy bonus, no KL term, lr 0.001 (20 x the default 5e-05), 60 iterations"


def test_a_reasoning_reads_the_state_by_a_cell_or_a_row_of_the_picture():
    assert regime.reads_the_state("I am at row 1 col 2 .")
    assert regime.reads_the_state("ice ice ice hole . goal ice ice ice . The goal is below .")  # image mode
    assert regime.reads_the_state("wall floor box target . wall me floor floor .")  # Sokoban's tiles
    assert not regime.reads_the_state("The goal is above and to the right .")
    assert not regime.reads_the_state("the lake is long so I think")
    assert not regime.reads_the_state("ice hole .")  # two tiles are no row

"""The reasoning regime per MI check (mirage/core/analysis/signature.py): each regime at
its thresholds, precedence (template collapse first, then a broken format or blown-up
entropy is degeneration whatever retrieval says), and
the first step a run enters each regime, read back from a store."""

from __future__ import annotations

import pytest

from mirage.core.analysis import signature as sig
from mirage.core.store.run_store import RunStore

CHANCE = 0.125


@pytest.mark.parametrize("retrieval, h_ratio, valid, regime", [
    (0.9, 1.0, 1.0, sig.DIVERSE),
    (0.9, 0.5, 1.0, sig.COMPRESSED),
    (CHANCE + sig.RETRIEVAL_MARGIN, sig.ENTROPY_KEPT, sig.FORMAT_VALID, sig.TEMPLATE_COLLAPSE),
    (CHANCE + sig.RETRIEVAL_MARGIN + 0.01, 1.0, 1.0, sig.DIVERSE),  # just above the margin
    (0.13, 0.89, 1.0, sig.LOW_ENTROPY_COLLAPSE),
    (0.13, 1.2, 0.7, sig.FORMAT_BREAKING),
    (0.13, 1.2, 0.49, sig.DEGENERATION),  # broken format wins
    (0.9, 3.01, 1.0, sig.DEGENERATION),  # entropy blown up, even while retrieval holds
    (0.13, sig.ENTROPY_BLOWUP, 1.0, sig.TEMPLATE_COLLAPSE),
    # valid, input-agnostic reasoning is template collapse however far its entropy rose
    # (boilerplate from a large grammar carries several times a state copy's entropy)
    (0.13, 8.0, 0.95, sig.TEMPLATE_COLLAPSE),
    (0.13, 8.0, 0.85, sig.DEGENERATION),  # ... but not once its format breaks
])
def test_each_regime_at_its_thresholds(retrieval, h_ratio, valid, regime):
    assert sig.classify(retrieval, CHANCE, h_ratio, valid) == regime


def test_the_rule_states_every_threshold():
    text = sig.rule()
    for value in (sig.RETRIEVAL_MARGIN, sig.ENTROPY_KEPT, sig.FORMAT_VALID, sig.FORMAT_BROKEN, sig.ENTROPY_BLOWUP):
        assert f"{value:g}" in text


def test_a_stored_run_reads_back_with_first_entries(tmp_path):
    store = RunStore(tmp_path / "runs.duckdb")
    store.create_run("r", {"steps": 30}, [], None)
    readings = {0: (0.8, 1.0, 1.0), 10: (0.7, 1.1, 1.0), 20: (0.2, 1.0, 0.95),
                30: (0.15, 1.3, 0.4)}  # retrieval, H(Z|X), format validity
    for step, (retrieval, h, valid) in readings.items():
        store.record_step("r", step, {"mi/first_turn/retrieval_acc": retrieval, "mi/first_turn/h_cond": h,
                                      "mi/first_turn/retrieval_chance": CHANCE,
                                      "mi/first_turn/format_valid": valid})
    store.record_step("r", 5, {"mi/first_turn/retrieval_acc": 0.1})  # a partial check is skipped
    checks = sig.run_checks(store, "r")
    assert [c.step for c in checks] == [0, 10, 20, 30]
    assert [c.regime for c in checks] == [sig.DIVERSE, sig.DIVERSE, sig.TEMPLATE_COLLAPSE, sig.DEGENERATION]
    assert checks[1].h_ratio == pytest.approx(1.1)
    assert sig.first_entries(checks) == {sig.DIVERSE: 0, sig.TEMPLATE_COLLAPSE: 20, sig.DEGENERATION: 30}
    assert sig.describe(checks) == ("diverse from step 0, template collapse from step 20, "
                                    "degeneration from step 30")
    assert sig.run_checks(store, "r", scope="all_turns") == [] and sig.describe([]) == "not measured"


def test_a_zero_starting_entropy_is_degeneration_once_it_rises():
    series = {"mi/first_turn/retrieval_acc": {0: 0.9, 5: 0.9}, "mi/first_turn/retrieval_chance": {0: 0.1, 5: 0.1},
              "mi/first_turn/h_cond": {0: 0.0, 5: 0.2}, "mi/first_turn/format_valid": {0: 1.0, 5: 1.0}}
    assert [c.regime for c in sig.checks_from_series(series)] == [sig.DIVERSE, sig.DEGENERATION]

"""Paired comparisons across seeds, the Spearman interval and the verdict rule, on
hand-checked cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mirage.report.paired import Paired, detectable_factor, paired, spearman_interval
from mirage.report.verdicts import (CONTRADICTED, HOLDS, NOT_DETECTED, PARTLY, TOO_FEW, Check,
                                    finding_verdict, verdict)


def test_diffs_1_2_3_give_mean_2_sd_1_and_the_t_interval():
    a, b = {0: 11.0, 1: 7.0, 2: 3.5}, {0: 10.0, 1: 5.0, 2: 0.5}  # diffs 1, 2, 3
    result = paired(a, b)
    half = 4.302652729911275 / math.sqrt(3)  # t_{0.975, 2} * sd / sqrt(n), sd = 1
    assert (result.n, result.mean, result.sd) == (3, 2.0, 1.0)
    assert result.low == pytest.approx(2 - half) and result.high == pytest.approx(2 + half)
    assert result.p_value == pytest.approx(stats.ttest_rel([11.0, 7.0, 3.5], [10.0, 5.0, 0.5]).pvalue)
    assert result.d_z == pytest.approx(2.0)
    # (t_{0.975,2} + t_{0.8,2}) / sqrt(3) = (4.3027 + 1.0607) / 1.7321
    assert result.detectable == pytest.approx((4.302653 + 1.060660) / math.sqrt(3), abs=1e-5)
    assert detectable_factor(3) == pytest.approx(result.detectable)


def test_paired_has_no_bootstrap_interval():
    """At 5 seeds a percentile bootstrap covers the mean about 83% of the time: not shown."""
    assert not [name for name in Paired.__dataclass_fields__ if "boot" in name]


def test_p_value_matches_scipy_on_random_pairs():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=6), rng.normal(size=6) + 0.5
    result = paired(dict(enumerate(a)), dict(enumerate(b)))
    assert result.p_value == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert result.mean == pytest.approx(float(np.mean(a - b)))


def test_unpaired_seeds_are_refused_naming_both_sets():
    with pytest.raises(ValueError, match=r"unpaired seeds: arm A has \[0, 1\], arm B has \[0, 2\]"):
        paired({0: 1.0, 1: 2.0}, {0: 1.0, 2: 2.0})
    with pytest.raises(ValueError, match="missing value"):
        paired({0: 1.0, 1: float("nan")}, {0: 1.0, 1: 2.0})


def test_one_seed_has_no_interval_and_too_few_seeds():
    result = paired({0: 2.0}, {0: 1.0})
    assert result.n == 1 and result.mean == 1.0 and result.too_few
    assert math.isnan(result.low) and verdict(result, 1) == TOO_FEW
    assert paired({}, {}).too_few


def test_zero_spread_gives_a_point_interval_not_nan():
    same = paired({0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert (same.low, same.high, same.p_value, same.d_z) == (0.0, 0.0, 1.0, 0.0)
    assert verdict(same, 1) == NOT_DETECTED
    shifted = paired({0: 1.5, 1: 2.5}, {0: 1.0, 1: 2.0})
    assert (shifted.low, shifted.high, shifted.p_value) == (0.5, 0.5, 0.0)
    assert shifted.d_z == math.inf and verdict(shifted, 1) == HOLDS


def _interval(low: float, high: float, n: int = 3) -> Paired:
    return Paired(n, (low + high) / 2, 1.0, low, high, 0.5, 1.0, 1.0)


def test_verdict_rule_reads_the_interval_against_the_prediction():
    assert verdict(_interval(0.1, 0.5), 1) == HOLDS
    assert verdict(_interval(0.1, 0.5), -1) == CONTRADICTED
    assert verdict(_interval(-0.5, -0.1), -1) == HOLDS
    assert verdict(_interval(-0.5, -0.1), 1) == CONTRADICTED
    assert verdict(_interval(-0.1, 0.5), 1) == NOT_DETECTED
    assert verdict(_interval(0.0, 0.5), 1) == NOT_DETECTED  # touching 0 does not exclude it
    with pytest.raises(ValueError, match="direction"):
        verdict(_interval(0.1, 0.5), 0)


def test_finding_verdict_from_its_checks():
    holds, against = Check("a", _interval(0.1, 0.2), 1), Check("b", _interval(0.1, 0.2), -1)
    unseen, few = Check("c", _interval(-0.1, 0.2), 1), Check("d", paired({0: 1.0}, {0: 0.0}), 1)
    assert finding_verdict([holds, holds]) == HOLDS
    assert finding_verdict([holds, unseen, against]) == PARTLY
    assert finding_verdict([unseen, against]) == CONTRADICTED
    assert finding_verdict([unseen, few]) == NOT_DETECTED
    assert finding_verdict([few, few]) == TOO_FEW


def test_spearman_interval_is_fisher_z_around_rho():
    x = np.arange(10.0)
    y = np.array([0, 2, 1, 3, 5, 4, 6, 8, 7, 9], dtype=float)
    result = spearman_interval(x, y)
    rho, p_value = stats.spearmanr(x, y)
    half = 1.959964 * math.sqrt(1.06 / 7)
    assert result.rho == pytest.approx(rho) and result.p_value == pytest.approx(p_value)
    assert result.low == pytest.approx(math.tanh(math.atanh(rho) - half), abs=1e-6)
    assert result.high == pytest.approx(math.tanh(math.atanh(rho) + half), abs=1e-6)
    assert verdict(result, 1) == HOLDS and verdict(result, -1) == CONTRADICTED
    assert verdict(spearman_interval(x[:3], y[:3]), 1) == TOO_FEW
    assert verdict(spearman_interval(x, np.ones(10)), 1) == TOO_FEW  # constant: rho undefined

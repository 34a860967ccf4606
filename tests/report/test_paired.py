"""Paired comparisons across seeds, the exact detectable difference, the Spearman interval
and the verdict rule, on hand-checked cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from mirage.report.paired import (CONFIDENCE, POWER, Paired, detectable_factor, paired, power,
                                  sd_range, spearman_interval)
from mirage.report.verdicts import (CONTRADICTED, HOLDS, NOT_DETECTED, PARTLY, TOO_FEW, Check,
                                    check_row, check_sentence, finding_verdict, verdict)


def test_diffs_1_2_3_give_mean_2_sd_1_and_the_t_interval():
    a, b = {0: 11.0, 1: 7.0, 2: 3.5}, {0: 10.0, 1: 5.0, 2: 0.5}  # diffs 1, 2, 3
    result = paired(a, b)
    half = 4.302652729911275 / math.sqrt(3)  # t_{0.975, 2} * sd / sqrt(n), sd = 1
    assert (result.n, result.mean, result.sd) == (3, 2.0, 1.0)
    assert result.low == pytest.approx(2 - half) and result.high == pytest.approx(2 + half)
    assert result.p_value == pytest.approx(stats.ttest_rel([11.0, 7.0, 3.5], [10.0, 5.0, 0.5]).pvalue)
    assert result.d_z == pytest.approx(2.0)
    # sd = 1: the detectable difference is the factor, its range the sd's interval times it
    assert result.detectable == pytest.approx(detectable_factor(3))
    sd_low, sd_high = sd_range(3)
    assert result.detectable_low == pytest.approx(detectable_factor(3) * sd_low)
    assert result.detectable_high == pytest.approx(detectable_factor(3) * sd_high)


def test_paired_has_no_bootstrap_interval():
    """At 5 seeds a percentile bootstrap covers the mean about 83% of the time: not shown."""
    assert not [name for name in Paired.__dataclass_fields__ if "boot" in name]


def test_detectable_factor_is_the_exact_noncentral_t_solution():
    exact = detectable_factor(5)
    assert round(exact, 3) == 1.682
    normal_approximation = (stats.t.ppf(0.975, 4) + stats.t.ppf(0.8, 4)) / math.sqrt(5)  # 1.662
    assert round(normal_approximation, 3) == 1.662 and abs(exact - normal_approximation) > 0.01
    for n in (2, 3, 5, 10):
        assert power(detectable_factor(n), n) == pytest.approx(POWER, abs=1e-9)
    assert detectable_factor(10) < detectable_factor(5) < detectable_factor(3)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        detectable_factor(1)


def test_power_matches_an_integral_over_the_sd():
    """Power without the noncentral t: the t statistic is (Z + d sqrt(n)) / sqrt(V / df)
    with Z normal and V chi-square(df); reject when |t| > t_crit, so
    power = E_V[Phi(d sqrt(n) - c) + Phi(-d sqrt(n) - c)], c = t_crit sqrt(V / df)."""
    n, d = 5, 1.3
    df, critical = n - 1, stats.t.ppf((1 + CONFIDENCE) / 2, n - 1)

    def rejecting(v: float) -> float:
        c = critical * math.sqrt(v / df)
        return (stats.norm.cdf(d * math.sqrt(n) - c) + stats.norm.cdf(-d * math.sqrt(n) - c)) \
            * stats.chi2.pdf(v, df)

    assert power(d, n) == pytest.approx(integrate.quad(rejecting, 0, np.inf)[0], abs=1e-7)
    assert power(0.0, n) == pytest.approx(1 - CONFIDENCE)  # both tails: alpha at no effect


def test_sd_range_is_the_chi_square_interval():
    low, high = sd_range(5)  # chi2_{0.975, 4} = 11.1433, chi2_{0.025, 4} = 0.48442
    assert low == pytest.approx(math.sqrt(4 / 11.143287), abs=1e-6)
    assert high == pytest.approx(math.sqrt(4 / 0.4844186), abs=1e-6)
    assert (round(low, 2), round(high, 2)) == (0.60, 2.87)


def test_detectable_range_of_five_seeds():
    result = paired({seed: 0.1 * (seed + 1) for seed in range(5)}, dict.fromkeys(range(5), 0.0))
    assert result.sd == pytest.approx(0.158114, abs=1e-6)  # diffs 0.1 .. 0.5
    assert (round(result.detectable, 3), round(result.detectable_low, 3),
            round(result.detectable_high, 3)) == (0.266, 0.159, 0.764)
    assert check_row(Check("x", result, 1))["detectable (80%)"] == "0.266 (0.159-0.764)"
    unseen = Check("x", paired({seed: 0.1 * (seed + 1) - 0.3 for seed in range(5)},
                               dict.fromkeys(range(5), 0.0)), 1)  # mean 0: not detected
    assert check_sentence(unseen).endswith(
        "detectable 0.266, 0.159-0.764 over the plausible sd -> not detected")


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
    return Paired(n, (low + high) / 2, 1.0, low, high, 0.5, 1.0, 1.0, 0.6, 2.9)


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

"""Paired comparisons across seeds, the exact detectable difference, Holm's adjustment,
the Spearman interval and the verdict rule, on hand-checked cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from mirage.report.findings import Finding
from mirage.report.paired import (CONFIDENCE, POWER, Paired, detectable_factor, holm, paired,
                                  power, sd_range, spearman_interval)
from mirage.report.verdicts import (CONTRADICTED, HOLDS, NOT_DETECTED, PARTLY, TOO_FEW, Check,
                                    check_row, check_sentence, finding_verdict, holm_adjusted,
                                    verdict)


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


def test_holm_on_a_hand_worked_family():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    assert holm([0.02]) == [0.02]  # a family of one is not adjusted
    assert holm([]) == []
    kept = holm([0.5, float("nan"), 0.01])  # NaN is no test: m = 2
    assert kept[0] == pytest.approx(0.5) and math.isnan(kept[1]) and kept[2] == pytest.approx(0.02)


def test_holm_rejects_what_the_step_down_procedure_rejects():
    """Holm at level a: walk the sorted p values, reject while p_(j) <= a / (m - j + 1).
    The adjusted p is <= a exactly for the hypotheses that walk rejects."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        p_values = list(rng.uniform(0, 0.2, size=rng.integers(1, 9)))
        adjusted = holm(p_values)
        assert all(a >= p for a, p in zip(adjusted, p_values)) and max(adjusted) <= 1
        for level in (0.01, 0.05, 0.1):
            rejected, m = set(), len(p_values)
            for j, i in enumerate(np.argsort(p_values)):
                if p_values[i] > level / (m - j):
                    break
                rejected.add(int(i))
            assert {i for i, a in enumerate(adjusted) if a <= level} == rejected


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


def _interval(low: float, high: float, n: int = 3, p_value: float = 0.5) -> Paired:
    return Paired(n, (low + high) / 2, 1.0, low, high, p_value, 1.0, 1.0, 0.6, 2.9)


def test_verdict_rule_reads_the_interval_against_the_prediction():
    assert verdict(_interval(0.1, 0.5), 1) == HOLDS
    assert verdict(_interval(0.1, 0.5), -1) == CONTRADICTED
    assert verdict(_interval(-0.5, -0.1), -1) == HOLDS
    assert verdict(_interval(-0.5, -0.1), 1) == CONTRADICTED
    assert verdict(_interval(-0.1, 0.5), 1) == NOT_DETECTED
    assert verdict(_interval(0.0, 0.5), 1) == NOT_DETECTED  # touching 0 does not exclude it
    with pytest.raises(ValueError, match="direction"):
        verdict(_interval(0.1, 0.5), 0)


def test_verdict_needs_the_holm_p_below_alpha_too():
    assert verdict(_interval(0.1, 0.5), 1, p_adjusted=0.049) == HOLDS
    assert verdict(_interval(0.1, 0.5), 1, p_adjusted=0.05) == NOT_DETECTED
    assert verdict(_interval(0.1, 0.5), -1, p_adjusted=0.049) == CONTRADICTED
    assert verdict(_interval(0.1, 0.5), -1, p_adjusted=0.2) == NOT_DETECTED
    assert verdict(_interval(0.1, 0.5), 1, p_adjusted=float("nan")) == NOT_DETECTED
    assert verdict(_interval(-0.1, 0.5), 1, p_adjusted=0.001) == NOT_DETECTED  # interval decides too
    assert verdict(_interval(0.1, 0.5, n=1), 1, p_adjusted=0.001) == TOO_FEW
    assert Check("a", _interval(0.1, 0.5), 1, p_adjusted=0.3).verdict == NOT_DETECTED


def test_holm_within_a_finding_turns_marginal_checks_into_not_detected():
    strong = Check("strong", _interval(0.1, 0.5, p_value=0.001), 1)
    marginal = Check("marginal", _interval(0.01, 0.5, p_value=0.03), 1)
    other = Check("other", _interval(0.01, 0.5, p_value=0.04), 1)
    rho = spearman_interval(np.arange(10.0), np.array([0, 2, 1, 3, 5, 4, 6, 8, 7, 9], dtype=float))
    correlated = Check("rho", rho, 1)  # p about 1e-5: the correlation joins the family
    assert marginal.verdict == HOLDS  # unadjusted, its interval decides
    # sorted: rho x 4, 0.001 x 3 = 0.003, 0.03 x 2 = 0.06, 0.04 x 1 -> 0.06 (monotone)
    assert [c.p_adjusted for c in holm_adjusted([strong, marginal, other, correlated])] == \
        pytest.approx([0.003, 0.06, 0.06, 4 * rho.p_value])
    finding = Finding("k", "title", "claim", checks=[strong, marginal, other, correlated])
    finding.conclude()
    assert [c.verdict for c in finding.checks] == [HOLDS, NOT_DETECTED, NOT_DETECTED, HOLDS]
    assert finding.verdict == PARTLY  # every interval excludes 0 on the predicted side
    caption, table = finding.tables[-1]
    assert "Holm-adjusted" in caption
    header, rows = table.splitlines()[0], table.splitlines()[2:]
    assert "| p | p (Holm) |" in header and "bootstrap" not in header
    assert rows[1].startswith("| marginal > 0 |") and "| 0.03 | 0.06 |" in rows[1]
    assert "p 0.03 (Holm 0.06)" in finding.evidence[1] and "not detected" in finding.evidence[1]


def test_check_sentence_states_the_detectable_range_when_not_detected():
    unseen = Check("x", paired({seed: 0.1 * (seed + 1) - 0.3 for seed in range(5)},
                               dict.fromkeys(range(5), 0.0)), 1)  # mean 0: not detected
    assert check_sentence(unseen).endswith(
        "p 1, detectable 0.266, 0.159-0.764 over the plausible sd -> not detected")
    seen = Check("y", paired({seed: 0.1 * (seed + 1) for seed in range(5)},
                             dict.fromkeys(range(5), 0.0)), 1)
    assert "detectable" not in check_sentence(seen) and check_sentence(seen).endswith("-> holds")


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

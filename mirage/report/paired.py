"""Paired comparisons across seeds, and rank correlations with an interval.

Two arms run with the same seeds share their warm start, validation episodes and sampling
stream, so the report compares them seed by seed: the per-seed differences carry the
effect, and their spread (not the spread of each arm) is the noise. Pure functions of
numbers; the verdicts drawn from them live in :mod:`mirage.report.verdicts`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

CONFIDENCE = 0.95  # two-sided interval level; the t-test's alpha is 1 - CONFIDENCE
POWER = 0.80  # the power the minimum detectable difference is stated for


@dataclass(frozen=True)
class Paired:
    """Arm A minus arm B, paired by seed. Interval fields are NaN when ``n < 2``."""

    n: int
    mean: float  # mean of the per-seed differences
    sd: float  # their standard deviation (ddof 1)
    low: float  # t interval at CONFIDENCE
    high: float
    p_value: float  # two-sided paired t-test
    d_z: float  # mean / sd, the standardised paired effect (signed inf at zero spread)
    detectable: float  # minimum detectable |difference| at CONFIDENCE and POWER
    detectable_low: float  # ... over the sd's chi-square interval at CONFIDENCE
    detectable_high: float

    @property
    def too_few(self) -> bool:
        return self.n < 2


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> Paired:
    """Compare ``a`` against ``b``, each seed -> value; the seeds must be the same.

    CI: mean +- t_{(1+CONFIDENCE)/2, n-1} * sd / sqrt(n). Minimum detectable difference:
    detectable_factor(n) * sd, and the same over the sd's interval (sd_range(n)). At zero
    spread the interval is the point itself and p is 0 (or 1 when every difference is 0):
    every seed moved by exactly the same amount.
    """
    if set(a) != set(b):
        raise ValueError(f"unpaired seeds: arm A has {sorted(a)}, arm B has {sorted(b)}; "
                         "a paired comparison needs the same seeds in both arms")
    seeds = sorted(a)
    diffs = np.array([float(a[s]) - float(b[s]) for s in seeds])
    if np.isnan(diffs).any():
        raise ValueError(f"missing value for seed(s) {[s for s, d in zip(seeds, diffs) if math.isnan(d)]}")
    n = len(diffs)
    nan = float("nan")
    if n < 2:
        mean = float(diffs.mean()) if n else nan
        return Paired(n, mean, nan, nan, nan, nan, nan, nan, nan, nan)
    mean, sd = float(diffs.mean()), float(diffs.std(ddof=1))
    factor = detectable_factor(n)
    sd_low, sd_high = sd_range(n)
    detectable = (factor * sd, factor * sd_low * sd, factor * sd_high * sd)
    if sd == 0.0:
        return Paired(n, mean, 0.0, mean, mean, 1.0 if mean == 0 else 0.0,
                      0.0 if mean == 0 else math.copysign(math.inf, mean), *detectable)
    margin = stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) * sd / math.sqrt(n)
    p_value = float(stats.ttest_rel(np.array([a[s] for s in seeds], dtype=float),
                                    np.array([b[s] for s in seeds], dtype=float)).pvalue)
    return Paired(n, mean, sd, mean - margin, mean + margin, p_value, mean / sd, *detectable)


def power(d: float, n: int) -> float:
    """Power of the two-sided paired t-test at alpha = 1 - CONFIDENCE with ``n`` seeds
    against a true standardised effect ``d`` (mean / sd of the differences): both tails
    of the noncentral t with n - 1 degrees of freedom and noncentrality d * sqrt(n)."""
    df, noncentrality = n - 1, d * math.sqrt(n)
    critical = stats.t.ppf((1 + CONFIDENCE) / 2, df)
    # the lower tail as the upper tail of the mirrored noncentrality: scipy's nct.cdf
    # returns NaN far out in that tail
    return float(stats.nct.sf(critical, df, noncentrality) + stats.nct.sf(critical, df, -noncentrality))


def detectable_factor(n: int) -> float:
    """The minimum detectable difference of ``n`` paired seeds (n >= 2) in units of the
    differences' sd: the exact d with power(d, n) = POWER, solved on the noncentral t
    (not the normal approximation (t_{(1+CONFIDENCE)/2, n-1} + t_{POWER, n-1}) / sqrt(n),
    which is too small at few seeds: 1.66 against 1.68 at n = 5)."""
    if n < 2:
        raise ValueError(f"a paired t-test needs at least 2 seeds, not {n}")
    high = 1.0
    while power(high, n) < POWER:  # power rises with d from alpha at d = 0
        high *= 2
    return float(optimize.brentq(lambda d: power(d, n) - POWER, 0.0, high, xtol=1e-12))


def sd_range(n: int) -> tuple[float, float]:
    """The sd's interval at CONFIDENCE from ``n`` values, as multiples of the sample sd:
    sqrt((n-1) / chi2_{(1+CONFIDENCE)/2, n-1}) .. sqrt((n-1) / chi2_{(1-CONFIDENCE)/2, n-1})
    (the chi-square interval for a normal sigma)."""
    df = n - 1
    return (math.sqrt(df / stats.chi2.ppf((1 + CONFIDENCE) / 2, df)),
            math.sqrt(df / stats.chi2.ppf((1 - CONFIDENCE) / 2, df)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979) of one family of p values, in their order:
    the i-th smallest of m becomes max over j <= i of min(1, (m - j + 1) * p_(j)). A NaN
    p value is no test: it stays NaN and does not count in m."""
    adjusted = [float("nan")] * len(p_values)
    tested = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Correlation:
    """Spearman's rho over ``n`` runs with its interval (NaN when ``n < 4`` or undefined)."""

    n: int
    rho: float
    low: float
    high: float
    p_value: float

    @property
    def too_few(self) -> bool:
        return self.n < 4 or math.isnan(self.rho)


def spearman_interval(x: np.ndarray, y: np.ndarray) -> Correlation:
    """Spearman's rho of ``x`` and ``y`` (shape [n]) with a Fisher-z interval at CONFIDENCE:
    tanh(atanh(rho) +- z * sqrt(1.06 / (n - 3))), the variance Fieller, Hartley and
    Pearson (1957) give for Spearman's rho."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    nan = float("nan")
    if n < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return Correlation(n, nan, nan, nan, nan)
    rho, p_value = stats.spearmanr(x, y)
    rho = float(rho)
    z = stats.norm.ppf((1 + CONFIDENCE) / 2) * math.sqrt(1.06 / (n - 3))
    centre = math.atanh(max(min(rho, 1 - 1e-12), -1 + 1e-12))
    return Correlation(n, rho, math.tanh(centre - z), math.tanh(centre + z), float(p_value))

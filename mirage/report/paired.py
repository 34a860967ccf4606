"""Paired comparisons across seeds, and rank correlations with an interval.

Two arms run with the same seeds share their warm start, validation episodes and sampling
stream, so the report compares them seed by seed: the per-seed differences carry the
effect, and their spread (not the spread of each arm) is the noise. Pure functions of
numbers; the verdicts drawn from them live in :mod:`mirage.report.verdicts`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

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

    @property
    def too_few(self) -> bool:
        return self.n < 2


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> Paired:
    """Compare ``a`` against ``b``, each seed -> value; the seeds must be the same.

    CI: mean +- t_{(1+CONFIDENCE)/2, n-1} * sd / sqrt(n). Minimum detectable difference
    (normal-approximation power formula with t quantiles): (t_{(1+CONFIDENCE)/2, n-1} +
    t_{POWER, n-1}) * sd / sqrt(n). At zero spread the interval is the point itself and
    p is 0 (or 1 when every difference is 0): every seed moved by exactly the same amount.
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
        return Paired(n, mean, nan, nan, nan, nan, nan, nan)
    mean, sd = float(diffs.mean()), float(diffs.std(ddof=1))
    half = stats.t.ppf((1 + CONFIDENCE) / 2, n - 1)
    detectable = detectable_factor(n) * sd
    if sd == 0.0:
        return Paired(n, mean, 0.0, mean, mean, 1.0 if mean == 0 else 0.0,
                      0.0 if mean == 0 else math.copysign(math.inf, mean), 0.0)
    margin = half * sd / math.sqrt(n)
    p_value = float(stats.ttest_rel(np.array([a[s] for s in seeds], dtype=float),
                                    np.array([b[s] for s in seeds], dtype=float)).pvalue)
    return Paired(n, mean, sd, mean - margin, mean + margin, p_value, mean / sd, float(detectable))


def detectable_factor(n: int) -> float:
    """(t_{(1+CONFIDENCE)/2, n-1} + t_{POWER, n-1}) / sqrt(n): the minimum detectable
    difference of ``n`` paired seeds in units of the differences' sd (n >= 2)."""
    return float((stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) + stats.t.ppf(POWER, n - 1)) / math.sqrt(n))


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

"""Episode returns and the group statistics every stage reads, in exact float64.

Two floating-point artifacts would otherwise make a group whose trajectories all earned
the same return look as if it carried signal (docs/diagnostics.md, "Zero-variance
groups"):

* turn rewards added in a different order give different floats (-0.8 and
  -0.7999999999999999), so a plain ``sum`` can make equal episodes unequal;
* the mean of G equal floats is not always that float (16 x 10.4 in float32), so
  ``R - mean`` is a rounding step, not 0, and GRPO's ``/ (std + 1e-6)`` blows it up.

Every return is therefore summed with :func:`episode_return` (``math.fsum``: correctly
rounded, so the same rewards give the same float in any order), and every "are these
returns all equal?" question is answered by :func:`returns_equal`, the one place the
tolerance lives. A group it calls equal has variance, std and advantage exactly 0.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable

# Relative tolerance of "equal returns": max - min <= RETURN_TOLERANCE * max(1, |mean|).
# Far above float64 dust (1e-16 relative) and far below any reward difference an
# environment means (MIRAGE's smallest designed reward step is 0.01).
RETURN_TOLERANCE = 1e-9


def episode_return(rewards: Iterable[float]) -> float:
    """The sum of one episode's turn rewards, correctly rounded (``math.fsum``), so two
    episodes with the same rewards get the same float whatever the summation order."""
    return math.fsum(rewards)


def returns_equal(returns: list[float]) -> bool:
    """Are these returns all equal, within ``max - min <= RETURN_TOLERANCE * max(1,
    |mean|)``? True for fewer than two returns (nothing differs)."""
    if len(returns) < 2:
        return True
    mean = math.fsum(returns) / len(returns)
    return max(returns) - min(returns) <= RETURN_TOLERANCE * max(1.0, abs(mean))


def group_mean(returns: list[float]) -> float:
    """Mean return (float64, correctly rounded sum); exactly the common value when all
    returns are the same float. NaN if empty."""
    if not returns:
        return math.nan
    if max(returns) == min(returns):
        return returns[0]  # fsum(3 x -0.2) / 3 is not -0.2
    return math.fsum(returns) / len(returns)


def group_variance(returns: list[float]) -> float:
    """RV(x): unbiased within-group variance of returns (PAPER.md section 4); exactly 0
    when :func:`returns_equal`, NaN for fewer than two returns."""
    if len(returns) < 2:
        return math.nan
    if returns_equal(returns):
        return 0.0
    mean = math.fsum(returns) / len(returns)
    return math.fsum((x - mean) ** 2 for x in returns) / (len(returns) - 1)


def variance_spread(variances: list[float]) -> float:
    """Std(RV)/Mean(RV) over a batch's groups (population std), PAPER.md section 4's
    pre-flight predictor of whether reward-variance filtering helps; NaN when no group has
    reward variance (or there are none)."""
    mean = statistics.fmean(variances) if variances else 0.0
    return statistics.pstdev(variances) / mean if mean > 0 else math.nan

"""How the report reads a run's reasoning regime: from a sustained signal, never from one
MI check.

One check's first-turn retrieval accuracy is a share of n samples, so it carries binomial
noise sqrt(p (1 - p) / n) (at n = 128 and p near 0.25 about 0.04, 40% of the 0.1 margin
that separates "at chance" from "input-dependent"): a check that dips under the margin by
one or two samples says nothing about the run. The report therefore classifies (with
mirage/core/analysis/signature.py's rule) a run's **endpoint**, the mean of its last K MI
checks after the warm start, the same K the endpoints of every other metric use; and a
regime counts as entered only once K consecutive checks are in it. Every section (the
regime tables, the gates, the page's top line, the sample tables) reads this rule.
"""

from __future__ import annotations

import math

from mirage.core.analysis import signature as sig
from mirage.report.summary import LAST_CHECKS

K = LAST_CHECKS  # checks in a run's endpoint, and consecutive checks for a regime entered


def endpoint_check(checks: list[sig.RegimeCheck], k: int = K) -> sig.RegimeCheck | None:
    """The run's regime at its endpoint: the mean of retrieval, chance, H(Z|X) over its
    first check and format validity at its last ``k`` checks after the warm start (step 0;
    fewer when it has fewer), classified by the signature's rule. ``step`` is the last
    check's. None when the run has no check after the warm start."""
    last = [check for check in checks if check.step >= 1][-k:]
    if not last:
        return None
    mean = {field: sum(getattr(check, field) for check in last) / len(last)
            for field in ("retrieval", "chance", "h_ratio", "format_valid")}
    return sig.RegimeCheck(last[-1].step, **mean, regime=sig.classify(**mean))


def endpoint_steps(checks: list[sig.RegimeCheck], k: int = K) -> list[int]:
    """The steps of the checks :func:`endpoint_check` averages."""
    return [check.step for check in checks if check.step >= 1][-k:]


def held(checks: list[sig.RegimeCheck], k: int = K) -> dict[str, int]:
    """Regime -> the first step of the first ``k`` consecutive checks in it, in the order
    the run entered them (a regime seen at fewer consecutive checks is not entered)."""
    entered: dict[str, int] = {}
    for i in range(len(checks) - k + 1):
        window = checks[i:i + k]
        if all(check.regime == window[0].regime for check in window):
            entered.setdefault(window[0].regime, window[0].step)
    return entered


def retrieval_sd(p: float, n: int) -> float:
    """Binomial sd of one check's retrieval accuracy from ``n`` samples at true accuracy
    ``p``: sqrt(p (1 - p) / n)."""
    return math.sqrt(p * (1 - p) / n)


def rule(k: int = K) -> str:
    """The sustained rule in one sentence, for the captions (the thresholds follow it)."""
    return (f"a run's regime is its endpoint's, the mean of its last {k} MI checks after the "
            f"warm start, classified by the rule; a regime counts as entered at the first of "
            f"{k} consecutive checks in it")


def noise(p: float, n: int) -> str:
    """One check's binomial noise at ``p`` from ``n`` samples against the margin."""
    sd = retrieval_sd(p, n)
    return (f"one check's retrieval from n = {n} first-turn samples has binomial sd "
            f"sqrt(p(1-p)/n) = {sd:.3f} at p = {p:.3f}, {sd / sig.RETRIEVAL_MARGIN:.0%} of the "
            f"{sig.RETRIEVAL_MARGIN:g} margin above chance")

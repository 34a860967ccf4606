"""Verdicts drawn from intervals and Holm-adjusted p values: one per directional check,
and one per finding from its checks. The rule is stated in the report's "How to read the
verdicts" section."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from mirage.report.paired import CONFIDENCE, Correlation, Paired, holm

HOLDS = "holds"
CONTRADICTED = "contradicted"
NOT_DETECTED = "not detected"
TOO_FEW = "too few seeds"
PARTLY = "holds partly"  # a finding only: some of its checks hold, not all
# a finding only: its study's gate (the regime it tests a claim in) failed, so its checks
# test nothing of the claim and it has no verdict, whatever they show
GATE_FAILED = "gate failed: no verdict"
# a finding only: its study is still running and its gate can still pass (or fail): no verdict yet
GATE_PENDING = "gate pending: no verdict"
CHECK_VERDICTS = (HOLDS, CONTRADICTED, NOT_DETECTED, TOO_FEW)
FINDING_VERDICTS = (HOLDS, PARTLY, CONTRADICTED, NOT_DETECTED, TOO_FEW, GATE_FAILED, GATE_PENDING)
ALPHA = round(1 - CONFIDENCE, 12)  # 0.05, not 1 - 0.95 = 0.05000000000000004


def verdict(comparison: Paired | Correlation, direction: int, p_adjusted: float | None = None) -> str:
    """``direction`` +1 predicts a positive difference (or correlation), -1 a negative
    one. Holds when the interval excludes 0 on the predicted side, contradicted when it
    excludes 0 on the other side, not detected when it contains 0. With ``p_adjusted``
    (the check's p after Holm within its family) the interval must also be backed by
    p_adjusted < ALPHA; otherwise the check is not detected."""
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, not {direction!r}")
    if comparison.too_few:
        return TOO_FEW
    significant = p_adjusted is None or p_adjusted < ALPHA  # False for a NaN p
    if (comparison.low > 0 or comparison.high < 0) and significant:
        return HOLDS if (comparison.low > 0) == (direction > 0) else CONTRADICTED
    return NOT_DETECTED


@dataclass(frozen=True)
class Check:
    """One directional prediction tested by an interval; ``p_adjusted`` is its p value
    Holm-adjusted over its family, every check of its registry experiment (None until
    the finding sets it)."""

    label: str
    comparison: Paired | Correlation
    direction: int
    p_adjusted: float | None = None

    @property
    def verdict(self) -> str:
        return verdict(self.comparison, self.direction, self.p_adjusted)


def holm_adjusted(checks: list[Check]) -> list[Check]:
    """``checks`` as one family, each with its Holm-adjusted p value."""
    adjusted = holm([check.comparison.p_value for check in checks])
    return [replace(check, p_adjusted=p) for check, p in zip(checks, adjusted)]


def finding_verdict(checks: list[Check], gate_passed: bool = True, gate_pending: bool = False) -> str:
    """A gate not passed: gate pending while its study runs and the gate can still pass,
    else gate failed (no verdict either way). Else all checks hold: holds; some: holds
    partly; none, and one is contradicted: contradicted; none and every check lacks seeds:
    too few seeds; else not detected."""
    if not gate_passed:
        return GATE_PENDING if gate_pending else GATE_FAILED
    verdicts = [check.verdict for check in checks]
    if verdicts and all(v == HOLDS for v in verdicts):
        return HOLDS
    if HOLDS in verdicts:
        return PARTLY
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    if verdicts and all(v == TOO_FEW for v in verdicts):
        return TOO_FEW
    return NOT_DETECTED


def _number(value: float, signed: bool = True) -> str:
    if math.isnan(value):
        return ""
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _interval(low: float, high: float) -> str:
    return "" if math.isnan(low) else f"[{low:+.3f}, {high:+.3f}]"


def _p(value: float | None) -> str:
    """Three significant figures: the verdict compares p with ALPHA, so 0.0497 must not
    read as 0.050."""
    return "" if value is None or math.isnan(value) else f"{value:.3g}"


def _detectable(c: Paired) -> str:
    if math.isnan(c.detectable):
        return ""
    return f"{c.detectable:.3f} ({c.detectable_low:.3f}-{c.detectable_high:.3f})"


def check_row(check: Check) -> dict:
    """One table row: the comparison, its interval, p raw and Holm-adjusted, d_z, the
    minimum detectable difference with its range over the sd's interval, and the verdict."""
    c = check.comparison
    predicted = ">" if check.direction > 0 else "<"
    p_values = {"p": _p(c.p_value), "p (Holm)": _p(check.p_adjusted)}
    if isinstance(c, Correlation):
        return {"check": f"{check.label} {predicted} 0", "runs": c.n, "rho": _number(c.rho),
                "95% CI (Fisher z)": _interval(c.low, c.high), **p_values, "verdict": check.verdict}
    return {"check": f"{check.label} {predicted} 0", "seeds": c.n, "mean diff": _number(c.mean),
            "95% CI (t)": _interval(c.low, c.high), **p_values, "d_z": _number(c.d_z),
            "detectable (80%)": _detectable(c), "verdict": check.verdict}


def check_sentence(check: Check) -> str:
    """'label: +0.031 [-0.100, +0.160], p 0.612 (Holm 1.000), detectable 0.290, 0.174-0.833
    over the plausible sd -> not detected' for the evidence."""
    c = check.comparison
    if isinstance(c, Correlation):
        middle = f"rho {_number(c.rho)} {_interval(c.low, c.high)}"
    else:
        middle = f"{_number(c.mean)} {_interval(c.low, c.high)}"
    if not c.too_few:
        middle += f", p {_p(c.p_value)}"
        if check.p_adjusted is not None:
            middle += f" (Holm {_p(check.p_adjusted)})"
    if isinstance(c, Paired) and not c.too_few and check.verdict == NOT_DETECTED:
        middle += (f", detectable {c.detectable:.3f}, {c.detectable_low:.3f}-"
                   f"{c.detectable_high:.3f} over the plausible sd")
    return f"{check.label}: {middle.strip()} -> {check.verdict}"

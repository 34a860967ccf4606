"""The regime a run's reasoning is in at each MI check, read from its stored metrics.

PAPER.md's picture is two axes, input dependence (first-turn retrieval accuracy against
chance, a lower bound on I(X;Z)) and within-input diversity (H(Z|X) against its value at
the run's first check), plus a gate the paper takes for granted: the reasoning still
parses. Template collapse is the quadrant where the reasoning stopped depending on the
input while its entropy looks healthy and its format stays valid. Everything else is told
apart from it, so a run whose reasoning merely broke (word salad) is not taken for one:

- ``template collapse``: retrieval <= chance + RETRIEVAL_MARGIN, H(Z|X) >= ENTROPY_KEPT x
  start, format validity >= FORMAT_VALID (first, as issue #32 lists it: reasoning that
  parses and ignores the input is template collapse however far its entropy rose, since
  boilerplate drawn from a large set can carry many times the entropy of reasoning that
  copies the state; ``h_ratio`` says how far);
- ``degeneration``: fewer than FORMAT_BROKEN of first turns parse, or H(Z|X) exceeds
  ENTROPY_BLOWUP x its start (the reasoning is noise, whatever retrieval says);
- ``format breaking``: the same two readings with format validity between FORMAT_BROKEN and
  FORMAT_VALID (input-agnostic and breaking: neither template collapse nor degeneration yet);
- ``low-entropy collapse``: retrieval <= chance + RETRIEVAL_MARGIN and H(Z|X) below
  ENTROPY_KEPT x start (one fixed answer for every input);
- ``compressed``: input-dependent, H(Z|X) below ENTROPY_KEPT x start;
- ``diverse``: input-dependent, H(Z|X) at or above ENTROPY_KEPT x start.

The thresholds are fixed here, stated wherever a regime is shown, and never tuned to a
study's result.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

RETRIEVAL_MARGIN = 0.1  # retrieval within this of chance: the reasoning no longer tells inputs apart
ENTROPY_KEPT = 0.9  # H(Z|X) at least this multiple of its first check: entropy looks healthy
FORMAT_VALID = 0.9  # template collapse: at least this share of first turns parse
FORMAT_BROKEN = 0.5  # degeneration: fewer than this share parse
ENTROPY_BLOWUP = 3.0  # degeneration: or H(Z|X) above this multiple of its first check

DEGENERATION = "degeneration"
TEMPLATE_COLLAPSE = "template collapse"
FORMAT_BREAKING = "format breaking"
LOW_ENTROPY_COLLAPSE = "low-entropy collapse"
COMPRESSED = "compressed"
DIVERSE = "diverse"
REGIMES = (DIVERSE, COMPRESSED, TEMPLATE_COLLAPSE, LOW_ENTROPY_COLLAPSE, FORMAT_BREAKING, DEGENERATION)

# The stored metrics it reads, per scope (first_turn or all_turns).
PARTS = ("retrieval_acc", "retrieval_chance", "h_cond", "format_valid")


def metric_names(scope: str = "first_turn") -> list[str]:
    """The stored metric names :func:`run_checks` reads for ``scope``."""
    return [f"mi/{scope}/{part}" for part in PARTS]


def rule() -> str:
    """The thresholds in one sentence, for every page that shows a regime."""
    return (f"template collapse = retrieval <= chance + {RETRIEVAL_MARGIN:g}, H(Z|X) >= "
            f"{ENTROPY_KEPT:g} x its first check and format validity >= {FORMAT_VALID:g}; "
            f"otherwise degeneration = format validity < {FORMAT_BROKEN:g} or H(Z|X) > "
            f"{ENTROPY_BLOWUP:g} x its first check; format breaking = input-agnostic with healthy entropy and format "
            f"validity in between; low-entropy collapse = input-agnostic with H(Z|X) below "
            f"{ENTROPY_KEPT:g} x; compressed / diverse = input-dependent with H(Z|X) below / at "
            f"or above {ENTROPY_KEPT:g} x")


def classify(retrieval: float, chance: float, h_ratio: float, format_valid: float) -> str:
    """The regime of one check (see the module docstring); ``h_ratio`` is H(Z|X) over its
    value at the run's first check."""
    agnostic = retrieval <= chance + RETRIEVAL_MARGIN
    healthy = h_ratio >= ENTROPY_KEPT
    if agnostic and healthy and format_valid >= FORMAT_VALID:
        return TEMPLATE_COLLAPSE
    if format_valid < FORMAT_BROKEN or h_ratio > ENTROPY_BLOWUP:
        return DEGENERATION
    if agnostic and healthy:
        return FORMAT_BREAKING
    if agnostic:
        return LOW_ENTROPY_COLLAPSE
    return DIVERSE if healthy else COMPRESSED


def entropy_ratio(h_cond: float, start: float) -> float:
    """H(Z|X) over its start, the ratio :func:`classify` reads (a start of 0 makes every
    ratio infinite, degeneration, unless H stays 0)."""
    if start > 0:
        return h_cond / start
    return 1.0 if h_cond == 0 else float("inf")


@dataclass(frozen=True)
class RegimeCheck:
    """One MI check of a run and the regime it was in."""

    step: int
    retrieval: float
    chance: float
    h_ratio: float
    format_valid: float
    regime: str


class MetricSource(Protocol):
    def metrics(self, run_id: str, name: str | None = None) -> list[tuple[int, str, float]]: ...


def checks_from_series(series: dict[str, dict[int, float]], scope: str = "first_turn") -> list[RegimeCheck]:
    """Classify every step where all of :func:`metric_names` were recorded; ``series``
    maps each name to {step: value}. H(Z|X) is compared with its value at the first such
    step (a start of 0 makes every ratio infinite: degeneration unless H stays 0)."""
    names = metric_names(scope)
    retrieval, chance, h_cond, valid = (series.get(name, {}) for name in names)
    steps = sorted(set(retrieval) & set(chance) & set(h_cond) & set(valid))
    if not steps:
        return []
    start = h_cond[steps[0]]
    rows = []
    for step in steps:
        ratio = entropy_ratio(h_cond[step], start)
        rows.append(RegimeCheck(step, retrieval[step], chance[step], ratio, valid[step],
                                classify(retrieval[step], chance[step], ratio, valid[step])))
    return rows


def checks_from_rows(rows: Iterable[tuple[int, str, float]], scope: str = "first_turn") -> list[RegimeCheck]:
    """:func:`checks_from_series` from one run's metrics in long format, (step, name,
    value) rows as the store, the app's queries and the report's frames hold them; rows of
    other metrics are ignored."""
    names = set(metric_names(scope))
    series: dict[str, dict[int, float]] = {}
    for step, name, value in rows:
        if name in names:
            series.setdefault(name, {})[int(step)] = float(value)
    return checks_from_series(series, scope)


def run_checks(store: MetricSource, run_id: str, scope: str = "first_turn") -> list[RegimeCheck]:
    """The regime at each of a stored run's MI checks (none when it logged no MI)."""
    return checks_from_rows((row for name in metric_names(scope) for row in store.metrics(run_id, name)), scope)


def first_entries(checks: list[RegimeCheck]) -> dict[str, int]:
    """Regime -> the first step the run was in it, in the order the run entered them."""
    entered: dict[str, int] = {}
    for check in checks:
        entered.setdefault(check.regime, check.step)
    return entered


def describe(checks: list[RegimeCheck]) -> str:
    """'diverse from step 0, template collapse from step 20, ...' (or 'not measured')."""
    if not checks:
        return "not measured"
    return ", ".join(f"{regime} from step {step}" for regime, step in first_entries(checks).items())

"""What a probe's batches say: each metric's mean with a t interval over the batches, the
regime signature, and two policies compared batch by batch.

The regime is the one every page shows (mirage/core/analysis/signature.py): its entropy
criteria compare H(Z|X) with a start, which for a probe is the first policy probed (the
baseline: a run's earlier checkpoint, or the model before training). Probed alone, a
policy is its own start (ratio 1), so only retrieval and format validity tell its regime.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats

from mirage.core.analysis.signature import classify, entropy_ratio
from mirage.probe.measure import Probe
from mirage.report.paired import CONFIDENCE, Paired, paired

FIRST = "mi/first_turn/"
# (stored metric, label) in the order the table shows them
SHOWN = (
    (f"{FIRST}retrieval_acc", "first-turn retrieval"),
    (f"{FIRST}retrieval_chance", "  chance"),
    (f"{FIRST}mi_est", "MI-Est (nats/token)"),
    (f"{FIRST}mi_zscore", "MI-ZScore"),
    (f"{FIRST}h_cond", "H(Z|X) (nats/token)"),
    (f"{FIRST}h_marg", "H(Z) (nats/token)"),
    (f"{FIRST}format_valid", "format validity"),
    (f"{FIRST}reasoning_tokens", "reasoning tokens"),
    ("train/success", "success"),
    ("probe/rv_mean", "reward variance, mean"),
    ("probe/rv_zero_share", "  prompts with none"),
)
COMPARED = tuple(name for name, _ in SHOWN if name != f"{FIRST}retrieval_chance")


@dataclass(frozen=True)
class Estimate:
    """A metric over a probe's batches: mean and t interval (NaN with one batch)."""

    n: int
    mean: float
    low: float
    high: float


def estimate(values: list[float]) -> Estimate:
    """Mean and t interval of the defined values (a batch where a ratio is undefined, such
    as Std(RV)/Mean(RV) without any reward variance, holds NaN and is left out)."""
    values = [v for v in values if not math.isnan(v)]
    n = len(values)
    if n == 0:
        return Estimate(0, math.nan, math.nan, math.nan)
    mean = statistics.fmean(values)
    if n < 2:
        return Estimate(n, mean, math.nan, math.nan)
    margin = stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Estimate(n, mean, mean - margin, mean + margin)


@dataclass(frozen=True)
class Regime:
    """A probe's regime and what it was read from."""

    name: str
    retrieval: float
    chance: float
    h_ratio: float  # H(Z|X) over the baseline's (1 for the baseline itself)
    format_valid: float


def regime(probe: Probe, baseline: Probe) -> Regime | None:
    """``probe``'s regime against ``baseline``'s H(Z|X); None without MI proxies (every
    reasoning empty, or one distinct prompt)."""
    retrieval, chance = probe.mean(f"{FIRST}retrieval_acc"), probe.mean(f"{FIRST}retrieval_chance")
    h_cond, start = probe.mean(f"{FIRST}h_cond"), baseline.mean(f"{FIRST}h_cond")
    valid = probe.mean(f"{FIRST}format_valid")
    if any(math.isnan(v) for v in (retrieval, chance, h_cond, start, valid)):
        return None
    ratio = entropy_ratio(h_cond, start)
    return Regime(classify(retrieval, chance, ratio, valid), retrieval, chance, ratio, valid)


def compare(later: Probe, baseline: Probe, name: str) -> Paired | None:
    """``later`` minus ``baseline`` on ``name``, paired by batch (both probed with one seed,
    so batch b holds the same prompts in both); None where either lacks the metric."""
    a = {b: m[name] for b, m in enumerate(later.metrics) if name in m}
    b = {b: m[name] for b, m in enumerate(baseline.metrics) if name in m}
    shared = set(a) & set(b)
    if not shared:
        return None
    return paired({k: a[k] for k in shared}, {k: b[k] for k in shared})

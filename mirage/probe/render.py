"""A probe's result as the table ``core probe`` prints and as JSON (``--json``)."""

from __future__ import annotations

import math
from typing import Any

from mirage.core.analysis.signature import rule
from mirage.probe.compare import COMPARED, SHOWN, Estimate, compare, estimate, regime
from mirage.probe.measure import Probe
from mirage.report.paired import Paired


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def _cell(found: Estimate) -> str:
    if found.n == 0:
        return "-"
    if math.isnan(found.low):
        return _number(found.mean)
    return f"{found.mean:.3f} [{found.low:.3f}, {found.high:.3f}]"


def _difference(found: Paired | None) -> str:
    if found is None:
        return "-"
    if found.too_few:
        return f"{found.mean:+.3f}"
    return f"{found.mean:+.3f} [{found.low:+.3f}, {found.high:+.3f}]"


def render(probes: list[Probe]) -> str:
    """Each probed policy's metrics (mean [95% t interval over batches]), its regime and,
    with two, the second minus the first paired by batch."""
    baseline = probes[0]
    config = baseline.config
    batches = len(baseline.metrics)
    head = (f"probe: {config.env.name}, {batches} batch(es) of P = {config.rollout.prompts} prompts x "
            f"G = {config.rollout.group_size} samples at temperature {config.rollout.temperature:g}, "
            f"seed {config.seed}; nothing trained")
    columns = [p.label for p in probes] + (["second - first (paired)"] if len(probes) == 2 else [])
    rows = [["metric", *columns]]
    for name, label in SHOWN:
        row = [label, *(_cell(estimate(p.values(name))) for p in probes)]
        if len(probes) == 2:
            row.append(_difference(compare(probes[1], baseline, name)) if name in COMPARED else "")
        rows.append(row)
    regimes = [regime(p, baseline) for p in probes]
    rows.append(["H(Z|X) / first policy's", *(_number(r.h_ratio) if r else "-" for r in regimes)])
    rows.append(["regime", *(r.name if r else "not measured" for r in regimes)])
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(len(rows[0]))]
    lines = [head, ""]
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    lines += ["", f"intervals: 95% t over the {batches} batches" if batches > 1 else
              "one batch: no interval (--batches N gives one, and paired differences their t interval)",
              f"regime (docs/diagnostics.md): {rule()}; the first policy is the start"]
    stored = [f"{p.label}: run {p.run_id}" for p in probes if p.run_id]
    if stored:
        lines.append("stored: " + "; ".join(stored))
    return "\n".join(lines)


def as_json(probes: list[Probe]) -> dict[str, Any]:
    """Everything the table shows, every metric's per-batch values, and the pairing."""
    baseline = probes[0]
    out: dict[str, Any] = {"rule": rule(), "probes": []}
    for probe in probes:
        found = regime(probe, baseline)
        names = dict.fromkeys(name for m in probe.metrics for name in m)
        out["probes"].append({
            "model": probe.label, "run_id": probe.run_id,
            "config": probe.config.model_dump(mode="json"),
            "regime": None if found is None else found.name,
            "h_ratio": None if found is None else _finite(found.h_ratio),
            "metrics": {name: _estimate_json(probe.values(name)) for name in names},
            "reward_variance_per_prompt": probe.variances,
        })
    if len(probes) == 2:
        out["difference"] = {}
        for name in COMPARED:
            found = compare(probes[1], baseline, name)
            if found is not None:
                out["difference"][name] = {"mean": _finite(found.mean), "low": _finite(found.low),
                                           "high": _finite(found.high), "p_value": _finite(found.p_value),
                                           "batches": found.n}
    return out


def _estimate_json(values: list[float]) -> dict[str, Any]:
    found = estimate(values)
    return {"mean": _finite(found.mean), "low": _finite(found.low), "high": _finite(found.high),
            "per_batch": [_finite(v) for v in values]}


def _finite(value: float) -> float | None:
    """JSON has no NaN: an undefined number is null."""
    return None if value is None or not math.isfinite(value) else float(value)

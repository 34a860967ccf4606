"""Selection rules: pure functions from per-item scores to the indices kept.

An item is a prompt group (prompt-level filters) or a trajectory inside one group (the
trajectory filter). Every rule ranks with :func:`ranking`: ``keep="largest"`` puts the
highest score first, ``keep="smallest"`` the lowest; ties keep the lower index first.
Every rule returns the kept indices sorted ascending.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

from mirage.core.rl.returns import returns_equal
from mirage.plugins.filters.conventions import FullMass, Rounding, TopPConventions

Keep = Literal["largest", "smallest"]

# Relative slack so that a mass equal to rho * total in exact arithmetic counts as
# reached although float sums say e.g. 0.6000000000000001 > 0.6.
_SLACK = 1e-12


def ranking(scores: Sequence[float], keep: Keep = "largest",
            eligible: Sequence[bool] | None = None) -> list[int]:
    """[N] scores -> indices of the eligible items, best first.

    ``eligible[i]`` False leaves item i out (None: every item is eligible).
    """
    if keep not in ("largest", "smallest"):
        raise ValueError(f"keep must be 'largest' or 'smallest', got {keep!r}")
    sign = -1.0 if keep == "largest" else 1.0
    items = [i for i in range(len(scores)) if eligible is None or eligible[i]]
    return sorted(items, key=lambda i: (sign * scores[i], i))


def top_p_indices(scores: Sequence[float], rho: float, include_zero: bool = False,
                  keep: Keep = "largest", conventions: TopPConventions = TopPConventions()) -> list[int]:
    """Linear top-p (PAPER.md section 4): the fewest items, in ranking order, whose
    summed score reaches ``rho * sum(scores)``.

    ``scores``: [N] non-negative masses (RV or reward std per group). Items scoring 0 add
    no mass; with ``include_zero`` False they are never kept (so an all-zero list keeps
    nothing), with it True they are ranked like the rest and an all-zero list keeps every
    item, since there is nothing to rank by. With ``keep="smallest"`` the lowest scores
    are taken first, which needs many more items to reach the same mass. ``conventions``
    (:mod:`.conventions`) set the edges the reference code treats otherwise: a tolerance
    taken off the mass, rho = 1, an all-zero list, a zero score met before the mass.
    """
    eligible = [include_zero or s > 0 for s in scores]
    if rho >= 1 and conventions.full_mass == "every_eligible":
        return [i for i in range(len(scores)) if eligible[i]]
    total = sum(scores)
    if total <= 0:
        return [i for i in range(len(scores)) if eligible[i]] if conventions.no_mass == "keep_eligible" else []
    threshold = rho * total * (1 - _SLACK) - conventions.selection_eps
    kept, mass = [], 0.0
    for index in ranking(scores, keep, eligible):
        if mass >= threshold:
            break
        if conventions.zero_stops and scores[index] <= 0:
            break
        kept.append(index)
        mass += scores[index]
    if conventions.zero_stops and mass < threshold:  # a zero score ended the walk short
        return []
    return sorted(kept)


def softmax_top_p_indices(scores: Sequence[float], rho: float, include_zero: bool = False,
                          keep: Keep = "largest", full_mass: FullMass = "positive") -> list[int]:
    """Softmax top-p (the reference code's softmax mode): nucleus selection over
    ``softmax(scores)`` (``softmax(-scores)`` for ``keep="smallest"``), i.e. the fewest
    most probable items whose probabilities sum to at least ``rho``.

    ``scores``: [N]. Items scoring 0 take part only with ``include_zero`` (then with
    weight exp(0)). Scores such as reward variances of 0/1 rewards (at most 0.25+) give
    an almost uniform softmax, so this keeps about a ``rho`` share of the eligible items.
    At rho = 1, ``full_mass="every_eligible"`` keeps every eligible item outright (the
    reference code's), where the mass rule may stop before items of vanishing weight.
    """
    eligible = [include_zero or s > 0 for s in scores]
    order = ranking(scores, keep, eligible)
    if not order:
        return []
    if rho >= 1 and full_mass == "every_eligible":
        return sorted(order)
    logits = [scores[i] if keep == "largest" else -scores[i] for i in order]
    top = max(logits)
    weights = [math.exp(value - top) for value in logits]
    total = sum(weights)
    kept, mass = [], 0.0
    for index, weight in zip(order, weights):
        kept.append(index)
        mass += weight / total
        if mass >= rho * (1 - _SLACK):
            break
    return sorted(kept)


def top_k_indices(scores: Sequence[float], rho: float, keep: Keep = "largest",
                  eligible: Sequence[bool] | None = None, rounding: Rounding = "slack") -> list[int]:
    """Top-k (a fixed fraction): the first ``max(1, int(rho * N))`` eligible items of
    the ranking, N = ``len(scores)`` counting ineligible items too (the reference code's
    ``int(rho * groups)``, at least 1). Fewer are kept only when fewer are eligible.
    ``rounding="slack"`` adds 1e-9 before truncating, so a product that float arithmetic
    puts just below an integer counts as it; ``"truncate"`` does not (the reference code)."""
    if rounding not in ("slack", "truncate"):
        raise ValueError(f"unknown rounding {rounding!r}; valid: slack, truncate")
    slack = 1e-9 if rounding == "slack" else 0.0  # 0.29 * 100 is 28.999999999999996
    count = max(1, int(rho * len(scores) + slack))
    return sorted(ranking(scores, keep, eligible)[:count])


def trajectory_indices(returns: Sequence[float], rho: float, keep: Keep = "largest") -> list[int]:
    """Trajectory-level selection inside one group (PAPER.md finding 8).

    ``returns``: [G] episode returns of one prompt's trajectories. With deviations
    d_k = R_k - mean(R), rank trajectories by |d_k| (``keep="largest"``: farthest from
    the group mean first) and keep the fewest whose d_k^2 reach ``rho`` of the group's
    squared-deviation mass (linear top-p on d_k^2). If the kept ones all lie on one side
    of the mean, the best-ranked trajectory from the other side is added, so the kept
    trajectories still have reward variance (at least 2 of them) and their group-relative
    advantages are not all zero. A group without variance keeps all its trajectories.
    """
    if returns_equal(list(returns)):  # no variance (float dust included): keep them all
        return list(range(len(returns)))
    mean = math.fsum(returns) / len(returns)
    deviations = [r - mean for r in returns]
    squared = [d * d for d in deviations]
    kept = top_p_indices(squared, rho, include_zero=True, keep=keep)
    order = ranking(squared, keep)
    for side in (1.0, -1.0):
        if not any(deviations[i] * side > 0 for i in kept):
            kept.append(next(i for i in order if deviations[i] * side > 0))
    return sorted(kept)

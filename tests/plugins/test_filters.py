"""Built-in filters (mirage/plugins/filters.py) and the group statistics they rank by.

``top_p`` keeps the fewest prompts, highest reward variance first, whose variance mass
reaches rho of the total (PAPER.md section 4).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.core.batch import Batch, Group, Selection, Trajectory, Turn
from mirage.core.config import FilterConfig
from mirage.plugins.filters import NoFilter, TopPFilter, group_scores, top_p_indices


# --------------------------------------------------------------------------- top_p_indices


@pytest.mark.parametrize(
    "scores, rho, expected",
    [
        # total 10, threshold 5: 4 < 5, 4 + 3 = 7 >= 5
        ([4, 3, 2, 1], 0.5, [0, 1]),
        # threshold 4: the top group alone reaches it
        ([4, 3, 2, 1], 0.4, [0]),
        # threshold 9: 4 + 3 + 2 = 9
        ([4, 3, 2, 1], 0.9, [0, 1, 2]),
        # rho 1 keeps every positive group
        ([4, 3, 2, 1], 1.0, [0, 1, 2, 3]),
        # order of the input does not matter; indices come back sorted
        ([1, 2, 3, 4], 0.5, [2, 3]),
        ([2, 4, 1, 3], 0.5, [1, 3]),
        # threshold 3 of total 4: 2 (index 1), then the tie 1/1/... lower index first
        ([1, 2, 1], 0.75, [0, 1]),
        ([1, 1, 1, 1], 0.5, [0, 1]),
        ([1, 3, 1, 3], 0.4, [1, 3]),
        # a single prompt
        ([5], 0.1, [0]),
        ([5], 1.0, [0]),
        # exactly at the threshold: 1 of total 2 reaches rho 0.5
        ([1, 1], 0.5, [0]),
        # 0.3 is half of 0.3 + 0.1 + 0.2 although floats say 0.6000000000000001
        ([0.3, 0.1, 0.2], 0.5, [0]),
        # tiny rho still keeps one group
        ([4, 3, 2, 1], 1e-9, [0]),
    ],
)
def test_top_p_hand_checked(scores, rho, expected):
    assert top_p_indices([float(s) for s in scores], rho) == expected


@pytest.mark.parametrize("scores", [[3, 0, 1, 0], [0, 0, 2], [1, 0]])
def test_zero_score_groups_are_never_kept_even_at_rho_one(scores):
    kept = top_p_indices([float(s) for s in scores], 1.0, include_zero=False)
    assert kept == [i for i, s in enumerate(scores) if s > 0]


@pytest.mark.parametrize("n", [1, 2, 5])
def test_all_zero_scores_keep_nothing_or_everything(n):
    zeros = [0.0] * n
    assert top_p_indices(zeros, 0.9, include_zero=False) == []
    assert top_p_indices(zeros, 0.9, include_zero=True) == list(range(n))
    assert top_p_indices(zeros, 1.0, include_zero=True) == list(range(n))


def test_include_zero_does_not_add_zero_groups_once_the_mass_is_reached():
    assert top_p_indices([3.0, 0.0, 1.0, 0.0], 1.0, include_zero=True) == [0, 2]
    assert top_p_indices([3.0, 0.0, 1.0, 0.0], 0.5, include_zero=True) == [0]


def test_empty_score_list_keeps_nothing():
    assert top_p_indices([], 0.9) == []
    assert top_p_indices([], 0.9, include_zero=True) == []


def brute_force_top_p(scores: list[int], rho: Fraction, include_zero: bool) -> list[int]:
    """Smallest k whose top-k (by score, lower index first on ties) reaches rho * total,
    in exact arithmetic."""
    total = sum(scores)
    if total == 0:
        return list(range(len(scores))) if include_zero else []
    ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    for k in range(len(scores) + 1):
        if sum(scores[i] for i in ranked[:k]) >= rho * total:
            return sorted(ranked[:k])
    raise AssertionError("unreachable: the full set has the whole mass")


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.integers(0, 20), min_size=1, max_size=12),
    rho_64ths=st.integers(1, 64),
    include_zero=st.booleans(),
)
def test_top_p_matches_brute_force(scores, rho_64ths, include_zero):
    # Integer scores and rho = k/64 are exact in binary floating point, so the float
    # implementation must agree with exact arithmetic.
    rho = Fraction(rho_64ths, 64)
    expected = brute_force_top_p(scores, rho, include_zero)
    assert top_p_indices([float(s) for s in scores], float(rho), include_zero) == expected


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.floats(0, 1e3, allow_nan=False, allow_subnormal=False), min_size=1, max_size=16),
    rho=st.floats(1e-6, 1.0),
)
def test_top_p_keeps_the_fewest_highest_groups_reaching_the_mass(scores, rho):
    kept = top_p_indices(scores, rho)
    total = sum(scores)
    if total <= 0:
        assert kept == []
        return
    assert kept == sorted(set(kept))
    assert all(scores[i] > 0 for i in kept)
    # The kept set is a prefix of the ranking by score (ties: lower index first).
    ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    assert sorted(ranked[: len(kept)]) == kept
    # It reaches the mass, and one group fewer would not (up to float rounding).
    mass = math.fsum(scores[i] for i in kept)
    assert mass >= rho * total * (1 - 1e-9)
    without_last = mass - scores[ranked[len(kept) - 1]]
    assert without_last < rho * total * (1 + 1e-9)


# --------------------------------------------------------------------------- groups and batches


def turn(reward: float) -> Turn:
    return Turn(context="X", response="Z </think> <answer> Up </answer>", reasoning="Z",
                answer="Up", actions=["Up"], format_ok=True, reward=reward,
                context_ids=[1, 2], response_ids=[3])


def group(index: int, returns: list[float | list[float]]) -> Group:
    """A group whose k-th trajectory has the given return (or per-turn rewards)."""
    trajectories = []
    for k, ret in enumerate(returns):
        rewards = ret if isinstance(ret, list) else [ret]
        trajectories.append(Trajectory(index, k, 100 * index + k, turns=[turn(r) for r in rewards]))
    return Group(prompt_index=index, seed=100 * index, trajectories=trajectories)


def test_episode_return_sums_turn_rewards():
    g = group(0, [[-0.1, 0.0, 1.0], [-0.1, -0.1]])
    assert g.returns == pytest.approx([0.9, -0.2])
    assert g.reward_mean == pytest.approx(0.35)


def test_reward_variance_is_unbiased():
    # mean 0.5, squared deviations 4 x 0.25 = 1, divided by G - 1 = 3 (not G = 4)
    g = group(0, [1, 0, 1, 0])
    assert g.reward_variance == pytest.approx(1 / 3)
    assert g.reward_std == pytest.approx(math.sqrt(1 / 3))
    # mean 0.25: 0.5625 + 3 x 0.0625 = 0.75, / 3
    assert group(1, [1, 0, 0, 0]).reward_variance == pytest.approx(0.25)
    # two samples: (a - b)^2 / 2
    assert group(2, [3, 1]).reward_variance == pytest.approx(2.0)
    assert group(3, [0.7] * 5).reward_variance == 0.0


def test_reward_variance_of_one_sample_is_undefined():
    assert math.isnan(group(0, [1.0]).reward_variance)
    assert math.isnan(Group(prompt_index=0, seed=0).reward_mean)


def hand_batch() -> Batch:
    # variances 1/3, 0, 1/4, 0 (see test_reward_variance_is_unbiased); total 7/12
    return Batch(step=1, groups=[
        group(0, [1, 0, 1, 0]),
        group(1, [1, 1, 1, 1]),
        group(2, [1, 0, 0, 0]),
        group(3, [0, 0, 0, 0]),
    ])


def test_group_scores_variance_and_std():
    batch = hand_batch()
    assert group_scores(batch, "variance") == pytest.approx([1 / 3, 0, 1 / 4, 0])
    assert group_scores(batch, "std") == pytest.approx([math.sqrt(1 / 3), 0, 0.5, 0])


@pytest.mark.parametrize(
    "rho, score, expected",
    [
        (0.5, "variance", [0]),  # 1/3 of 7/12 is 4/7 >= 0.5
        (0.9, "variance", [0, 2]),  # 4/7 < 0.9 <= 1
        (0.55, "variance", [0]),  # 4/7 = 0.571 >= 0.55
        (0.55, "std", [0, 2]),  # 0.577 / 1.077 = 0.536 < 0.55
        (1.0, "variance", [0, 2]),  # zero-variance groups are never kept
    ],
)
def test_top_p_filter_selects_on_a_hand_made_batch(rho, score, expected):
    batch = hand_batch()
    selection = TopPFilter(FilterConfig(rho=rho, score=score)).select(batch)
    assert isinstance(selection, Selection)
    assert selection.kept_groups == expected
    assert selection.kept_samples == {}
    metrics = selection.metrics
    assert metrics["filter/kept_groups"] == len(expected)
    assert metrics["filter/kept_ratio"] == len(expected) / 4
    assert metrics["filter/zero_variance_groups"] == 2.0
    batch.apply(selection)
    assert [g.prompt_index for g in batch.kept_groups()] == expected
    assert batch.kept_ratio == len(expected) / 4
    assert all(g.kept_trajectories() == [] for g in batch.groups if not g.kept)


def test_top_p_filter_metrics_hand_checked():
    selection = TopPFilter(FilterConfig(rho=0.5)).select(hand_batch())
    metrics = selection.metrics
    # kept 1/3 of a total 7/12
    assert metrics["filter/kept_score_mass"] == pytest.approx(4 / 7)
    # variances 16/48, 0, 12/48, 0: mean 7/48, population std sqrt(51)/48
    assert metrics["filter/rv_cv"] == pytest.approx(math.sqrt(51) / 7)


def test_top_p_filter_on_an_all_zero_batch():
    batch = Batch(step=1, groups=[group(i, [1, 1, 1]) for i in range(3)])
    kept = TopPFilter(FilterConfig(rho=0.9)).select(batch)
    assert kept.kept_groups == []
    assert kept.metrics["filter/kept_ratio"] == 0.0
    assert kept.metrics["filter/kept_score_mass"] == 0.0
    assert kept.metrics["filter/zero_variance_groups"] == 3.0
    everything = TopPFilter(FilterConfig(rho=0.9, include_zero=True)).select(batch)
    assert everything.kept_groups == [0, 1, 2]
    batch.apply(kept)
    assert batch.kept_groups() == [] and batch.kept_ratio == 0.0


def test_no_filter_keeps_everything():
    batch = hand_batch()
    selection = NoFilter(FilterConfig(name="none")).select(batch)
    assert selection.kept_groups == [0, 1, 2, 3]
    assert selection.metrics["filter/kept_ratio"] == 1.0
    assert selection.metrics["filter/kept_score_mass"] == pytest.approx(1.0)
    assert selection.metrics["filter/zero_variance_groups"] == 2.0


def test_top_p_declares_that_it_needs_variance():
    assert TopPFilter.requires_variance is True
    assert getattr(NoFilter, "requires_variance", False) is False


def test_apply_sets_kept_samples_per_group():
    batch = hand_batch()
    batch.apply(Selection(kept_groups=[0, 2], kept_samples={2: [0, 3]}))
    assert [g.kept for g in batch.groups] == [True, False, True, False]
    assert batch.groups[0].kept_trajectories() == batch.groups[0].trajectories
    assert [t.sample_index for t in batch.groups[2].kept_trajectories()] == [0, 3]

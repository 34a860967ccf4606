"""Built-in filters (mirage/plugins/filters/) and the group statistics they rank by.

``top_p`` keeps the fewest prompts, highest reward variance first, whose variance mass
reaches rho of the total (PAPER.md section 4); ``top_k`` a fixed fraction; ``trajectory``
every prompt with a subset of its trajectories; ``entropy`` and ``length`` rank by other
quantities. Every expected value below is worked out by hand in the comment beside it.
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.core.config.options import NoOptions, options_class
from mirage.core.config.run_config import FilterConfig, RunConfig
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.batch import Batch, Group, Selection, Trajectory, Turn
from mirage.core.run.stages import loss_scale
from mirage.core.run.validate import build_config
from mirage.plugins.filters import (
    EntropyFilter, LengthFilter, NoFilter, TopKFilter, TopPFilter, TrajectoryFilter,
    group_scores, mean_entropy, mean_response_tokens, softmax_top_p_indices, top_k_indices,
    top_p_indices, trajectory_indices,
)
from mirage.plugins.verl_algorithms.register import GRPO


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


def brute_force_top_p(scores: list[int], rho: Fraction, include_zero: bool,
                      keep: str = "largest") -> list[int]:
    """Smallest k whose best k (by score, descending for largest and ascending for
    smallest, lower index first on ties; zero scores only with include_zero) reach
    rho * total, in exact arithmetic."""
    total = sum(scores)
    if total == 0:
        return list(range(len(scores))) if include_zero else []
    sign = -1 if keep == "largest" else 1
    candidates = [i for i in range(len(scores)) if include_zero or scores[i] > 0]
    ranked = sorted(candidates, key=lambda i: (sign * scores[i], i))
    for k in range(len(ranked) + 1):
        if sum(scores[i] for i in ranked[:k]) >= rho * total:
            return sorted(ranked[:k])
    raise AssertionError("unreachable: the candidates hold the whole mass")


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.integers(0, 20), min_size=1, max_size=12),
    rho_64ths=st.integers(1, 64),
    include_zero=st.booleans(),
    keep=st.sampled_from(["largest", "smallest"]),
)
def test_top_p_matches_brute_force(scores, rho_64ths, include_zero, keep):
    # Integer scores and rho = k/64 are exact in binary floating point, so the float
    # implementation must agree with exact arithmetic.
    rho = Fraction(rho_64ths, 64)
    expected = brute_force_top_p(scores, rho, include_zero, keep)
    assert top_p_indices([float(s) for s in scores], float(rho), include_zero, keep) == expected


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


@pytest.mark.parametrize("value, size", [(0.9, 8), (-0.2, 3), (0.9, 16), (10.6, 16)])
def test_equal_returns_have_exactly_zero_variance(value, size):
    # sum([0.9] * 8) / 8 is not 0.9 in floats, which left a variance of 1e-32: such a
    # group would count as having signal, and a batch of them would never be empty.
    assert group(0, [value] * size).reward_variance == 0.0
    batch = Batch(step=1, groups=[group(i, [value] * size) for i in range(3)])
    assert built(TopPFilter).select(batch).kept_groups == []


def test_reward_variance_of_one_sample_is_undefined():
    assert math.isnan(group(0, [1.0]).reward_variance)
    assert math.isnan(Group(prompt_index=0, seed=0).reward_mean)


def built(cls: type, options: dict | None = None, **settings):
    """Filter ``cls`` as the run builds it: ``settings`` are the ``filter`` section's,
    ``options`` its own (``filter.options``)."""
    options = options or {}
    return cls(RunConfig(filter=FilterConfig(**settings, options=options)), options_class(cls)(**options))


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
    selection = built(TopPFilter, rho=rho, score=score).select(batch)
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
    selection = built(TopPFilter, rho=0.5).select(hand_batch())
    metrics = selection.metrics
    # kept 1/3 of a total 7/12
    assert metrics["filter/kept_score_mass"] == pytest.approx(4 / 7)
    # variances 16/48, 0, 12/48, 0: mean 7/48, population std sqrt(51)/48
    assert metrics["filter/rv_cv"] == pytest.approx(math.sqrt(51) / 7)


def test_top_p_filter_on_an_all_zero_batch():
    batch = Batch(step=1, groups=[group(i, [1, 1, 1]) for i in range(3)])
    kept = built(TopPFilter, rho=0.9).select(batch)
    assert kept.kept_groups == []
    assert kept.metrics["filter/kept_ratio"] == 0.0
    assert kept.metrics["filter/kept_score_mass"] == 0.0
    assert kept.metrics["filter/zero_variance_groups"] == 3.0
    everything = built(TopPFilter, rho=0.9, include_zero=True).select(batch)
    assert everything.kept_groups == [0, 1, 2]
    batch.apply(kept)
    assert batch.kept_groups() == [] and batch.kept_ratio == 0.0


def test_no_filter_keeps_everything():
    batch = hand_batch()
    selection = built(NoFilter, name="none").select(batch)
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


def test_every_builtin_filter_declares_whether_it_needs_variance():
    needs = {cls: cls.requires_variance for cls in
             [NoFilter, TopPFilter, TopKFilter, TrajectoryFilter, EntropyFilter, LengthFilter]}
    assert needs == {NoFilter: False, TopPFilter: True, TopKFilter: True, TrajectoryFilter: True,
                     EntropyFilter: False, LengthFilter: False}


# --------------------------------------------------------------------------- keep smallest


@pytest.mark.parametrize(
    "scores, rho, include_zero, expected",
    [
        # ascending 1, 2, 3, 4 of total 10, threshold 5: 1 + 2 = 3 < 5, + 3 = 6 >= 5
        ([4, 3, 2, 1], 0.5, False, [1, 2, 3]),
        # threshold 1: the smallest alone
        ([4, 3, 2, 1], 0.1, False, [3]),
        ([4, 3, 2, 1], 1.0, False, [0, 1, 2, 3]),
        # zeros are not candidates: 1 (index 2) < 2, + 3 = 4 >= 2
        ([3, 0, 1, 0], 0.5, False, [0, 2]),
        # with include_zero the zeros come first (no mass), then 1 reaches 0.8
        ([3, 0, 1, 0], 0.2, True, [1, 2, 3]),
        # ties: lower index first
        ([2, 2, 2, 2], 0.5, False, [0, 1]),
        ([5], 0.3, False, [0]),
    ],
)
def test_top_p_keep_smallest_hand_checked(scores, rho, include_zero, expected):
    assert top_p_indices([float(s) for s in scores], rho, include_zero, "smallest") == expected


def test_unknown_keep_is_refused():
    with pytest.raises(ValueError, match="keep must be"):
        top_p_indices([1.0, 2.0], 0.5, keep="middle")


# --------------------------------------------------------------------------- softmax top-p


def test_softmax_top_p_hand_computed():
    # softmax(ln 4, ln 2, ln 2) = 4/8, 2/8, 2/8
    scores = [math.log(4), math.log(2), math.log(2)]
    assert softmax_top_p_indices(scores, 0.5) == [0]  # 0.5 reaches 0.5
    assert softmax_top_p_indices(scores, 0.6) == [0, 1]  # 0.75, tie -> index 1 first
    assert softmax_top_p_indices(scores, 0.75) == [0, 1]
    assert softmax_top_p_indices(scores, 0.8) == [0, 1, 2]
    assert softmax_top_p_indices(scores, 1.0) == [0, 1, 2]
    # keep smallest: softmax(-s) = 1/4, 1/2, 1/2 normalised to 0.2, 0.4, 0.4
    assert softmax_top_p_indices(scores, 0.4, keep="smallest") == [1]
    assert softmax_top_p_indices(scores, 0.5, keep="smallest") == [1, 2]
    assert softmax_top_p_indices(scores, 0.8, keep="smallest") == [1, 2]  # 0.8 reaches 0.8
    assert softmax_top_p_indices(scores, 0.85, keep="smallest") == [0, 1, 2]


def test_softmax_top_p_zero_scores():
    # Without include_zero only index 0 is a candidate: probability 1.
    assert softmax_top_p_indices([1.0, 0.0, 0.0], 0.99) == [0]
    # With it: e / (e + 2) = 0.576, then (e + 1) / (e + 2) = 0.788
    assert softmax_top_p_indices([1.0, 0.0, 0.0], 0.5, include_zero=True) == [0]
    assert softmax_top_p_indices([1.0, 0.0, 0.0], 0.6, include_zero=True) == [0, 1]
    assert softmax_top_p_indices([1.0, 0.0, 0.0], 0.8, include_zero=True) == [0, 1, 2]
    # all zero: nothing, or a uniform nucleus (ceil(0.5 * 4) = 2 items)
    assert softmax_top_p_indices([0.0] * 4, 0.5) == []
    assert softmax_top_p_indices([0.0] * 4, 0.5, include_zero=True) == [0, 1]
    assert softmax_top_p_indices([0.0] * 4, 1.0, include_zero=True) == [0, 1, 2, 3]
    assert softmax_top_p_indices([], 0.5) == []


def test_softmax_of_small_variances_keeps_about_a_rho_share():
    # RVs of 0/1 rewards are at most 0.25+: the softmax is nearly uniform (documented).
    scores = [0.05, 0.1, 0.15, 0.2, 0.25, 0.05, 0.1, 0.15, 0.2, 0.25]
    kept = softmax_top_p_indices(scores, 0.5)
    assert len(kept) in (5, 6)
    assert len(top_p_indices(scores, 0.5)) == 4  # linear: 0.25 + 0.25 + 0.2 + 0.2 >= 0.75


def test_top_p_filter_softmax_mode_on_a_hand_made_batch():
    # variances 1/3, 0, 1/4, 0: candidates 0 and 2; softmax weights e^(1/3), e^(1/4)
    p0 = math.exp(1 / 3) / (math.exp(1 / 3) + math.exp(1 / 4))  # 0.5208
    assert built(TopPFilter, options={"mode": "softmax"}, rho=0.52).select(hand_batch()).kept_groups == [0]
    assert p0 < 0.53
    assert built(TopPFilter, options={"mode": "softmax"}, rho=0.53).select(hand_batch()).kept_groups == [0, 2]
    smallest = built(TopPFilter, options={"mode": "softmax"}, rho=0.4, keep="smallest")
    assert smallest.select(hand_batch()).kept_groups == [2]


# --------------------------------------------------------------------------- top-k


@pytest.mark.parametrize(
    "scores, rho, keep, expected",
    [
        ([4, 3, 2, 1], 0.5, "largest", [0, 1]),  # int(0.5 * 4) = 2
        ([4, 3, 2, 1], 0.5, "smallest", [2, 3]),
        ([4, 3, 2, 1], 0.1, "largest", [0]),  # int(0.4) = 0 -> at least 1
        ([4, 3, 2, 1], 0.1, "smallest", [3]),
        ([4, 3, 2, 1], 1.0, "largest", [0, 1, 2, 3]),
        ([1, 1, 1, 1], 0.5, "largest", [0, 1]),  # ties: lower index first
        ([1, 1, 1, 1], 0.5, "smallest", [0, 1]),
        ([2, 4, 1, 3], 0.75, "largest", [0, 1, 3]),  # int(3.0) = 3
        ([7], 0.01, "largest", [0]),  # a single prompt
        ([0, 0, 0], 0.5, "largest", [0]),  # top_k itself does not look at zeros
    ],
)
def test_top_k_hand_checked(scores, rho, keep, expected):
    assert top_k_indices([float(s) for s in scores], rho, keep) == expected


def test_top_k_count_is_not_lost_to_float_rounding():
    assert len(top_k_indices([1.0] * 100, 0.29)) == 29  # 0.29 * 100 = 28.999999999999996


def test_top_k_keeps_only_eligible_items():
    # k = 2 of 4, but only indices 0 and 3 are eligible; and only one when one is
    assert top_k_indices([4.0, 3.0, 2.0, 1.0], 0.5, eligible=[True, False, False, True]) == [0, 3]
    assert top_k_indices([4.0, 3.0, 2.0, 1.0], 0.5, eligible=[False, False, True, False]) == [2]
    assert top_k_indices([4.0, 3.0], 0.5, eligible=[False, False]) == []


@pytest.mark.parametrize(
    "rho, keep, include_zero, expected",
    [
        # variances 1/3, 0, 1/4, 0; k = int(0.5 * 4) = 2 of the two with variance
        (0.5, "largest", False, [0, 2]),
        (0.5, "smallest", False, [0, 2]),
        (0.25, "largest", False, [0]),  # k = 1
        (0.25, "smallest", False, [2]),
        (0.5, "smallest", True, [1, 3]),  # the zero-variance groups are the smallest
        (0.75, "largest", True, [0, 1, 2]),  # 1/3, 1/4, then the tie 0/0 -> index 1
        (1.0, "largest", False, [0, 2]),
    ],
)
def test_top_k_filter_on_a_hand_made_batch(rho, keep, include_zero, expected):
    selection = built(TopKFilter, name="top_k", rho=rho, keep=keep, include_zero=include_zero).select(hand_batch())
    assert selection.kept_groups == expected
    assert selection.metrics["filter/kept_trajectories"] == 4.0 * len(expected)


def test_top_k_filter_on_an_all_zero_batch_and_a_single_prompt():
    zeros = Batch(step=1, groups=[group(i, [1, 1, 1]) for i in range(3)])
    assert built(TopKFilter, rho=0.5).select(zeros).kept_groups == []
    assert built(TopKFilter, rho=0.5, include_zero=True).select(zeros).kept_groups == [0]
    single = Batch(step=1, groups=[group(0, [1, 0])])
    for rho in (0.01, 1.0):
        assert built(TopKFilter, rho=rho).select(single).kept_groups == [0]
        assert built(TopPFilter, rho=rho).select(single).kept_groups == [0]


# --------------------------------------------------------------------------- trajectory level


@pytest.mark.parametrize(
    "returns, rho, keep, expected",
    [
        # mean 0.5, every d^2 = 0.25 of total 1: ties in order, 0 (above) and 1 (below)
        ([1, 0, 1, 0], 0.5, "largest", [0, 1]),
        # 0 and 1 reach the mass but both lie above the mean: the first below (2) joins
        ([1, 1, 0, 0], 0.5, "largest", [0, 1, 2]),
        # mean 0.25, d^2 = 0.5625, 0.0625 x 3, total 0.75; threshold 0.675 needs three
        ([1, 0, 0, 0], 0.9, "largest", [0, 1, 2]),
        # threshold 0.375: index 0 alone, then the best-ranked one below the mean
        ([1, 0, 0, 0], 0.5, "largest", [0, 1]),
        # mean 0.5, d^2 = 0.25, 0.25, 0: rho 1 keeps every trajectory off the mean
        ([1, 0, 0.5], 1.0, "largest", [0, 1]),
        # binary rewards, 3 wins of 8: the winners lie farther from the mean 0.375
        # (d^2 0.390625 vs 0.140625, total 1.875, threshold 0.9375): two winners give
        # 0.78, three 1.17; all above the mean, so the first loser (3) joins
        ([1, 1, 1, 0, 0, 0, 0, 0], 0.5, "largest", [0, 1, 2, 3]),
        ([1, 1, 1, 0, 0, 0, 0, 0], 0.4, "largest", [0, 1, 3]),  # 0.75 <= 0.78
        # smallest: mean 1.6, d^2 1.96, .36, 2.56, .16, .16 (total 5.2, threshold .52):
        # .16 + .16 + .36 reaches it; 3, 4 above and 1 below the mean
        ([3, 1, 0, 2, 2], 0.1, "smallest", [1, 3, 4]),
        # smallest: the three at 0 (below) reach 0.15 of 0.75; 3 (above) joins
        ([0, 0, 0, 1], 0.2, "smallest", [0, 1, 2, 3]),
        # no variance: everything
        ([0.7, 0.7, 0.7, 0.7], 0.5, "largest", [0, 1, 2, 3]),
        ([0.7, 0.7], 0.5, "smallest", [0, 1]),
    ],
)
def test_trajectory_indices_hand_checked(returns, rho, keep, expected):
    assert trajectory_indices([float(r) for r in returns], rho, keep) == expected


@settings(max_examples=300, deadline=None)
@given(
    returns=st.lists(st.integers(-3, 3), min_size=2, max_size=16),
    rho_64ths=st.integers(1, 64),
    keep=st.sampled_from(["largest", "smallest"]),
)
def test_trajectory_selection_keeps_variance_and_the_mass(returns, rho_64ths, keep):
    kept = trajectory_indices([float(r) for r in returns], rho_64ths / 64, keep)
    assert kept == sorted(set(kept))
    if len(set(returns)) == 1:
        assert kept == list(range(len(returns)))
        return
    kept_returns = [returns[i] for i in kept]
    assert len(kept) >= 2 and len(set(kept_returns)) >= 2  # still has variance
    mean = Fraction(sum(returns), len(returns))
    squared = [(r - mean) ** 2 for r in returns]
    assert sum(squared[i] for i in kept) >= Fraction(rho_64ths, 64) * sum(squared)


def test_trajectory_filter_keeps_every_prompt_and_the_documented_trajectories():
    batch = Batch(step=1, groups=[
        group(0, [1, 1, 0, 0]),  # -> 0, 1, 2 (see the table above)
        group(1, [1, 0, 0, 0]),  # -> 0, 1
        group(2, [0.5, 0.5, 0.5, 0.5]),  # no variance: all four
    ])
    selection = built(TrajectoryFilter, name="trajectory", rho=0.5).select(batch)
    assert selection.kept_groups == [0, 1, 2]
    assert selection.kept_samples == {0: [0, 1, 2], 1: [0, 1], 2: [0, 1, 2, 3]}
    metrics = selection.metrics
    assert metrics["filter/kept_groups"] == 3.0 and metrics["filter/kept_ratio"] == 1.0
    assert metrics["filter/kept_trajectories"] == 9.0
    # squared deviations: group 0 four x 0.25 (kept 0.75), group 1 0.5625 + 3 x 0.0625
    # (kept 0.625), group 2 none; (0.75 + 0.625) / (1 + 0.75)
    assert metrics["filter/kept_score_mass"] == pytest.approx(1.375 / 1.75)
    batch.apply(selection)
    assert [len(g.kept_trajectories()) for g in batch.groups] == [3, 2, 4]


def grpo_advantages(batch: Batch, monkeypatch, config: RunConfig | None = None) -> dict:
    """Run GRPO.update on ``batch`` with the optimizer step stubbed out; return
    {(prompt, sample): advantage} of the trained rows."""
    seen: dict[tuple[int, int], float] = {}
    algo = GRPO(config or build_config({}), NoOptions())
    rows_of = {id(t.turns[0]): (t.prompt_index, t.sample_index) for t in batch.trajectories}

    def record(run, rows):
        for row in rows:  # GRPO: every token of a row carries its trajectory's advantage
            seen[rows_of[id(row.turn)]] = float(row.advantages[0])
        return {}

    monkeypatch.setattr(algo, "_mini_batch", record)
    algo.update(run=SimpleNamespace(plugins=build_plugins()), batch=batch)
    return seen


def test_grpo_normalises_over_the_kept_trajectories_only(monkeypatch):
    batch = Batch(step=1, groups=[group(0, [1, 1, 0, 0])])
    batch.apply(built(TrajectoryFilter, rho=0.5).select(batch))
    advantages = grpo_advantages(batch, monkeypatch)
    # kept returns 1, 1, 0: mean 2/3, unbiased std sqrt(1/3)
    std = math.sqrt(1 / 3)
    assert set(advantages) == {(0, 0), (0, 1), (0, 2)}
    assert advantages[(0, 0)] == pytest.approx((1 / 3) / std, abs=1e-5)
    assert advantages[(0, 2)] == pytest.approx((-2 / 3) / std, abs=1e-5)


# --------------------------------------------------------------------------- entropy and length


def scored_turn(logprobs: list[float], reward: float = 0.0) -> Turn:
    return Turn(context="X", response="Z", reasoning="Z", answer="Up", actions=["Up"],
                format_ok=True, reward=reward, context_ids=[1], response_ids=[3] * len(logprobs),
                old_logprobs=logprobs)


def scored_group(index: int, trajectories: list[list[list[float]]]) -> Group:
    """Trajectory k has one turn per log-prob list; returns alternate 1, 0 so the group
    has reward variance."""
    return Group(prompt_index=index, seed=index, trajectories=[
        Trajectory(index, k, k, turns=[scored_turn(lp, reward=float(k % 2 == 0) if t == 0 else 0.0)
                                       for t, lp in enumerate(turns)])
        for k, turns in enumerate(trajectories)
    ])


def entropy_batch() -> Batch:
    return Batch(step=1, groups=[
        # trajectory means 1 and 3 -> 2 (a token mean over all of them would be 5/3)
        scored_group(0, [[[-1.0, -1.0]], [[-3.0]]]),
        # two turns: tokens -0.5, -0.5, -2 -> 1.0; and 0.5 -> group 0.75
        scored_group(1, [[[-0.5], [-0.5, -2.0]], [[-0.5]]]),
        # 4 and 1 -> 2.5
        scored_group(2, [[[-4.0]], [[-1.0, -1.0, -1.0]]]),
    ])


def test_mean_entropy_is_the_mean_over_trajectories_of_token_means():
    assert [mean_entropy(g) for g in entropy_batch().groups] == pytest.approx([2.0, 0.75, 2.5])


def test_mean_response_tokens_counts_all_turns_of_a_trajectory():
    # group 0: 2 and 1 tokens; group 1: 3 and 1; group 2: 1 and 3
    assert [mean_response_tokens(g) for g in entropy_batch().groups] == [1.5, 2.0, 2.0]


@pytest.mark.parametrize(
    "rho, keep, expected",
    [
        (0.34, "largest", [2]),  # int(1.02) = 1: entropy 2.5
        (0.67, "largest", [0, 2]),  # 2.5, 2
        (0.34, "smallest", [1]),  # 0.75
        (0.67, "smallest", [0, 1]),
        (1.0, "largest", [0, 1, 2]),
    ],
)
def test_entropy_filter_ranks_by_mean_entropy(rho, keep, expected):
    selection = built(EntropyFilter, name="entropy", rho=rho, keep=keep).select(entropy_batch())
    assert selection.kept_groups == expected


@pytest.mark.parametrize(
    "rho, keep, expected",
    [
        (0.34, "largest", [1]),  # lengths 1.5, 2, 2: the tie keeps index 1
        (0.67, "largest", [1, 2]),
        (0.34, "smallest", [0]),
        (0.67, "smallest", [0, 1]),
    ],
)
def test_length_filter_ranks_by_mean_response_length(rho, keep, expected):
    selection = built(LengthFilter, name="length", rho=rho, keep=keep).select(entropy_batch())
    assert selection.kept_groups == expected


def test_entropy_and_length_skip_zero_variance_groups_unless_include_zero():
    batch = entropy_batch()
    for traj in batch.groups[2].trajectories:  # group 2 (highest entropy) loses its variance
        for t in traj.turns:
            t.reward = 0.0
    assert built(EntropyFilter, rho=0.34).select(batch).kept_groups == [0]
    assert built(EntropyFilter, rho=0.34, include_zero=True).select(batch).kept_groups == [2]
    assert built(LengthFilter, rho=0.67).select(batch).kept_groups == [0, 1]


def test_entropy_filter_needs_old_logprobs():
    batch = Batch(step=1, groups=[group(0, [1, 0])])  # turns without old log-probs
    with pytest.raises(ValueError, match="old log-probs"):
        built(EntropyFilter, name="entropy").select(batch)


# --------------------------------------------------------------------------- loss scaling


@pytest.mark.parametrize(
    "kept_share, settings, expected",
    [
        (0.25, {}, 1.0),
        (0.25, {"loss_scaling": "linear"}, 0.25),
        (0.25, {"loss_scaling": "sqrt"}, 0.5),
        (1.0, {"loss_scaling": "sqrt"}, 1.0),
        (0.25, {"step_size_matching": True, "filter": {"rho": 0.9}}, 0.9),
        (0.25, {"loss_scaling": "linear", "step_size_matching": True, "filter": {"rho": 0.5}}, 0.125),
        (0.64, {"loss_scaling": "sqrt", "step_size_matching": True, "filter": {"rho": 0.5}}, 0.4),
    ],
)
def test_loss_scale_values(kept_share, settings, expected):
    assert loss_scale(kept_share, RunConfig.model_validate(settings)) == pytest.approx(expected)


def test_grpo_multiplies_its_advantages_by_the_loss_scale(monkeypatch):
    batch = Batch(step=1, groups=[group(0, [1, 0, 1, 0]), group(1, [0, 0, 1, 0])])
    plain = grpo_advantages(batch, monkeypatch)
    batch.loss_scale = 0.25
    scaled = grpo_advantages(batch, monkeypatch)
    assert plain.keys() == scaled.keys() and len(plain) == 8
    assert all(scaled[k] == pytest.approx(0.25 * plain[k]) for k in plain)
    assert plain[(0, 0)] == pytest.approx(0.866, abs=1e-3)


# --------------------------------------------------------------------------- through the command line

BAD_FILTER_INPUTS = {
    "rho zero": (["--rho", "0"], ["filter.rho", "greater than 0", "got 0"]),
    "rho nan": (["--set", "filter.rho=NaN"], ["filter.rho"]),
    "rho above one": (["--rho", "1.2"], ["filter.rho", "got 1.2"]),
    "unknown mode": (["--filter-mode", "cubic"], ["filter.options.mode", "'linear' or 'softmax'", "'cubic'"]),
    "unknown score": (["--filter-score", "mad"], ["filter.score", "'variance' or 'std'"]),
    "unknown keep": (["--keep", "middle"], ["filter.keep", "'largest' or 'smallest'"]),
    "unknown loss scaling": (["--loss-scaling", "cube"],
                             ["invalid loss_scaling", "'none', 'linear' or 'sqrt'"]),
    "zero empty steps": (["--max-empty-steps", "0"], ["invalid max_empty_steps", "got 0"]),
    "unknown filter": (["--filter", "nosuch"],
                       ["'nosuch'", "valid: entropy, length, none, quartile, top_k, top_p, trajectory"]),
    "G = 1 with top_p": (["--group-size", "1", "--filter", "top_p"], ["'top_p'", "group size", "got 1"]),
    "G = 1 with top_k": (["--group-size", "1", "--filter", "top_k"], ["'top_k'", "got 1"]),
    "G = 1 with trajectory": (["--group-size", "1", "--filter", "trajectory"], ["'trajectory'", "got 1"]),
}


@pytest.fixture
def store_with_a_run(tmp_path):
    from mirage.core.store.run_store import RunStore

    db = tmp_path / "store" / "runs.duckdb"
    RunStore(db).create_run("existing", RunConfig().model_dump(mode="json"), [], None, seed=0)
    return db


def files_under(path):
    return sorted(p.relative_to(path) for p in path.rglob("*"))


@pytest.mark.parametrize("case", sorted(BAD_FILTER_INPUTS))
def test_bad_filter_settings_exit_2_with_one_line_and_write_nothing(case, store_with_a_run,
                                                                    tiny_config_file, contents):
    from typer.testing import CliRunner

    from mirage.core.cli.program import app
    from mirage.core.store.run_store import RunStore

    args, fragments = BAD_FILTER_INPUTS[case]
    before = contents(RunStore(store_with_a_run)), files_under(store_with_a_run.parent)
    result = CliRunner().invoke(app, ["run", "--config", str(tiny_config_file), "--quiet",
                                      "--db", str(store_with_a_run), *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert (contents(RunStore(store_with_a_run)), files_under(store_with_a_run.parent)) == before


def test_unknown_mode_in_a_real_process(cli, tiny_config_file, tmp_path):
    db = tmp_path / "fresh" / "runs.duckdb"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--filter-mode", "cubic")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "error: invalid filter.options.mode: Input should be 'linear' or 'softmax' (got 'cubic')"
    ]
    assert not db.exists()


def test_filter_options_reach_the_config(monkeypatch, tiny_config_file, tmp_path):
    from typer.testing import CliRunner

    from mirage.core.cli.program import app
    from mirage.core.run import loop

    seen = []
    monkeypatch.setattr(loop, "execute", lambda config, db, **kw: seen.append(config) or "r")
    args = ["run", "--config", str(tiny_config_file), "--db", str(tmp_path / "x.duckdb"),
            "--filter", "top_k", "--rho", "0.25", "--filter-mode", "softmax", "--filter-score", "std",
            "--keep", "smallest", "--include-zero", "--loss-scaling", "sqrt",
            "--step-size-matching", "--max-empty-steps", "7"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen[0].filter == FilterConfig(
        name="top_k", rho=0.25, options={"mode": "softmax"}, score="std", keep="smallest",
        include_zero=True)
    loop_settings = ("loss_scaling", "step_size_matching", "max_empty_steps")
    assert [getattr(seen[0], name) for name in loop_settings] == ["sqrt", True, 7]
    seen.clear()
    # without the options, the config file's (here: RunConfig's) defaults stay
    assert CliRunner().invoke(app, args[:5]).exit_code == 0
    assert seen[0].filter == FilterConfig()
    assert [getattr(seen[0], name) for name in loop_settings] == [getattr(RunConfig(), name)
                                                                   for name in loop_settings]

"""Top-p and top-k under MIRAGE's conventions and the reference code's (docs/conventions.md).

Expected kept sets are written from the rules (PAPER.md sections 4 and 6) and checked
against the cases of issue #46, where RAGEN's own code was run on the same inputs.
"""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.core.config.run_config import FilterConfig, RunConfig
from mirage.core.errors import ConfigError
from mirage.core.run.validate import component_options
from mirage.plugins.filters import EntropyFilter, LengthFilter, TopKFilter, TopPFilter
from mirage.plugins.filters.conventions import TOP_K_PRESETS, TOP_P_PRESETS, TopPConventions
from mirage.plugins.filters.rules import softmax_top_p_indices, top_k_indices, top_p_indices

RAGEN = TOP_P_PRESETS["ragen"]


# (h) selection_eps

def test_the_tolerance_stops_one_group_early():
    stds = [0.5, 0.577, 0.577]  # rho 0.7: target 1.1578; two groups hold 1.154
    assert 0.577 * 2 < 0.7 * sum(stds) and 0.577 * 2 >= 0.7 * sum(stds) - 0.01
    assert top_p_indices(stds, 0.7) == [0, 1, 2]
    assert top_p_indices(stds, 0.7, conventions=RAGEN) == [1, 2]


def test_the_tolerance_keeps_nothing_below_its_size():
    scores = [0.005, 0.004]  # rho x sum = 0.0081 < 0.01: zero groups already reach the target
    assert top_p_indices(scores, 0.9) == [0, 1]
    assert top_p_indices(scores, 0.9, conventions=RAGEN) == []
    assert top_p_indices(scores, 0.9, conventions=TopPConventions(selection_eps=0.001)) == [0, 1]


# (i) rho = 1

@pytest.mark.parametrize("rule", ["linear", "softmax"])
def test_at_rho_one_every_eligible_group_or_the_positive_ones(rule):
    scores = [0.5, 0.0, 0.25]
    if rule == "linear":
        assert top_p_indices(scores, 1.0, include_zero=True) == [0, 2]
        assert top_p_indices(scores, 1.0, include_zero=True, conventions=RAGEN) == [0, 1, 2]
        assert top_p_indices(scores, 1.0, conventions=RAGEN) == [0, 2]  # zero groups not eligible
    else:
        huge = [60.0, 0.0, 0.25]  # exp(-60) of the mass: the rule stops before the others
        assert softmax_top_p_indices(huge, 1.0, include_zero=True) == [0]
        assert softmax_top_p_indices(huge, 1.0, include_zero=True, full_mass="every_eligible") == [0, 1, 2]


# (j) an all-zero batch

def test_an_all_zero_batch_keeps_everything_or_nothing():
    zeros = [0.0] * 4
    assert top_p_indices(zeros, 0.9, include_zero=True) == [0, 1, 2, 3]
    assert top_p_indices(zeros, 0.9, include_zero=True, conventions=RAGEN) == []  # k* = 0
    assert top_p_indices(zeros, 0.9) == top_p_indices(zeros, 0.9, conventions=RAGEN) == []
    assert top_p_indices(zeros, 1.0, include_zero=True, conventions=RAGEN) == [0, 1, 2, 3]  # rho = 1 first


def test_a_zero_score_met_before_the_mass_keeps_nothing():
    # keep smallest with include_zero: the zero group comes first and ends the walk
    scores = [0.0, 0.3, 0.5]
    assert top_p_indices(scores, 0.5, include_zero=True, keep="smallest") == [0, 1, 2]
    assert top_p_indices(scores, 0.5, include_zero=True, keep="smallest", conventions=RAGEN) == []
    assert top_p_indices(scores, 0.5, keep="smallest", conventions=RAGEN) == [1, 2]


# (k) top-k rounding

def test_top_k_count_at_the_edge():
    assert 0.7 * 90 < 63  # float: 62.99999999999999
    scores = [float(i) for i in range(90)]
    assert len(top_k_indices(scores, 0.7)) == 63
    assert len(top_k_indices(scores, 0.7, rounding="truncate")) == 62
    assert len(top_k_indices(scores, 0.5, rounding="truncate")) == 45
    assert top_k_indices([1.0, 2.0], 0.1, rounding="truncate") == [1]  # at least one


# the options

def built(cls, options: dict, **shared):
    config = RunConfig(filter=FilterConfig(name="top_p", options=options, **shared))
    return cls(config, component_options(cls, options, "filter", cls.__name__, "filter.options."))


def scored_choice(filter_, scores):
    return filter_.choose(scores, [filter_.config.filter.include_zero or s > 0 for s in scores])


def test_the_filter_preset_sets_every_edge_and_a_given_one_wins():
    stds = [0.5, 0.577, 0.577]
    assert scored_choice(built(TopPFilter, {}, rho=0.7), stds) == [0, 1, 2]
    assert scored_choice(built(TopPFilter, {"convention": "ragen"}, rho=0.7), stds) == [1, 2]
    assert scored_choice(built(TopPFilter, {"convention": "ragen", "selection_eps": 0.0}, rho=0.7), stds) == [0, 1, 2]
    assert built(TopPFilter, {"convention": "ragen"}).options.conventions() == RAGEN
    scores = [float(i) for i in range(90)]
    for cls in (TopKFilter, EntropyFilter, LengthFilter):
        assert len(scored_choice(built(cls, {}, rho=0.7), scores)) == 63
        assert len(scored_choice(built(cls, {"convention": "ragen"}, rho=0.7), scores)) == 62
    assert built(TopKFilter, {"convention": "ragen"}).options.conventions() == TOP_K_PRESETS["ragen"]


@pytest.mark.parametrize("cls, option, value, valid", [
    (TopPFilter, "convention", "verl", "'mirage' or 'ragen'"),
    (TopPFilter, "full_mass", "all", "'positive' or 'every_eligible'"),
    (TopPFilter, "no_mass", "all", "'keep_eligible' or 'keep_none'"),
    (TopKFilter, "rounding", "round", "'slack' or 'truncate'"),
])
def test_an_unknown_filter_convention_is_refused_naming_the_valid_ones(cls, option, value, valid):
    with pytest.raises(ConfigError, match=f"filter.options.{option}.*{valid}"):
        built(cls, {option: value})


def test_a_negative_tolerance_is_refused():
    with pytest.raises(ConfigError, match="selection_eps"):
        built(TopPFilter, {"selection_eps": -0.01})


# where the conventions cannot matter, the presets agree exactly

@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.05, 3.0), min_size=1, max_size=12), st.floats(0.05, 0.99),
       st.sampled_from(["largest", "smallest"]), st.booleans())
def test_top_p_presets_agree_away_from_the_edges(scores, rho, keep, include_zero):
    # positive scores, rho < 1, and no partial sum within the tolerance below the target
    target = rho * sum(scores)
    ordered = sorted(scores, reverse=keep == "largest")
    partial = [math.fsum(ordered[:i]) for i in range(len(ordered) + 1)]  # the empty prefix too
    if any(target - 0.011 <= p < target + 1e-9 for p in partial):
        return
    assert top_p_indices(scores, rho, include_zero, keep, RAGEN) == top_p_indices(scores, rho, include_zero, keep)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 200), st.floats(0.01, 1.0))
def test_top_k_presets_agree_away_from_integer_edges(groups, rho):
    product = rho * groups
    if abs(product - round(product)) < 1e-6:
        return
    scores = [float(i % 7) for i in range(groups)]
    assert top_k_indices(scores, rho, rounding="truncate") == top_k_indices(scores, rho)

"""The diagnostics' maths on constructed inputs (PAPER.md sections 2, 3 and 6)."""

import math

import pytest
import torch

from mirage.core.parallel.world import World
from mirage.core.config.run_config import CollapseAlarmConfig
from mirage.core.rl.batch import Batch, Group, Trajectory, Turn
from mirage.plugins.diagnostics import mi_proxies
from mirage.plugins.diagnostics.collapse import check_collapse
from mirage.plugins.diagnostics.cross_scoring import assign_columns, cross_score, sampled_turns
from mirage.plugins.diagnostics.gradients import variance_buckets
from mirage.plugins.diagnostics.mi import ema, marginal_spread, recall_at
from mirage.plugins.diagnostics.rewards import reward_structure


def test_entropy_identity_holds_exactly():
    torch.manual_seed(0)
    scores = -torch.rand(12, 4, dtype=torch.float64) * 20
    lengths = torch.randint(1, 9, (12,))
    owner = torch.arange(12) % 4
    m = mi_proxies(scores, lengths, owner)
    assert m["h_marg"] == m["mi_est"] + m["h_cond"]
    assert m["h_marg_seq"] == m["mi_seq_est"] + m["h_cond_seq"]
    # and H(Z) is what its definition says, -mean(marginal), up to rounding
    marginal = torch.logsumexp(scores, 1) - math.log(4)
    assert math.isclose(m["h_marg"], float((-marginal / lengths).mean()), abs_tol=1e-12)
    assert math.isclose(m["h_marg_seq"], float(-marginal.mean()), abs_tol=1e-12)
    assert m["mi_est"] != 0.0


def test_input_dependent_reasoning_is_retrieved():
    owner = torch.tensor([0, 0, 1, 1, 2, 2])
    scores = torch.full((6, 3), -30.0, dtype=torch.float64)
    scores[torch.arange(6), owner] = -3.0
    m = mi_proxies(scores, torch.full((6,), 3), owner)
    assert m["retrieval_acc"] == 1.0
    assert m["retrieval_chance"] == 1 / 3
    assert m["recall@2"] == m["recall@4"] == 1.0
    assert m["recall@2_chance"] == 2 / 3 and m["recall@8_chance"] == 1.0
    # matched - marginal = -3 - (logsumexp([-3,-30,-30]) - log 3), per token over 3 tokens
    expected = (-3.0 - (math.log(math.exp(-3) + 2 * math.exp(-30)) - math.log(3))) / 3
    assert math.isclose(m["mi_est"], expected, rel_tol=1e-9)
    assert m["mi_zscore"] > 0


def test_input_agnostic_reasoning_sits_at_chance_with_zero_mi():
    owner = torch.arange(16) % 8
    # each reasoning has its own likelihood, the same under every prompt
    scores = (-torch.arange(1, 17, dtype=torch.float64))[:, None].expand(16, 8).clone()
    m = mi_proxies(scores, torch.full((16,), 5), owner)
    assert math.isclose(m["mi_est"], 0.0, abs_tol=1e-12)
    assert math.isclose(m["mi_seq_est"], 0.0, abs_tol=1e-12)
    assert math.isclose(m["mi_zscore"], 0.0, abs_tol=1e-9)
    for k, key in [(1, "retrieval_acc"), (2, "recall@2"), (4, "recall@4"), (8, "recall@8")]:
        assert m[key] == pytest.approx(k / 8)  # ties broken at random: exactly chance
        assert m[key] == pytest.approx(m["retrieval_chance"] if k == 1 else m[f"recall@{k}_chance"])


def test_three_by_two_case_against_hand_computation():
    # 3 reasonings x 2 prompts; reasoning 2 scores both prompts alike.
    scores = torch.tensor([[-2.0, -4.0], [-6.0, -3.0], [-5.0, -5.0]], dtype=torch.float64)
    owner = torch.tensor([0, 1, 0])
    lengths = torch.tensor([2, 3, 5])
    m = mi_proxies(scores, lengths, owner, epsilon=1e-3)
    marginal = [math.log((math.exp(-2) + math.exp(-4)) / 2),
                math.log((math.exp(-6) + math.exp(-3)) / 2),
                -5.0]
    matched = [-2.0, -3.0, -5.0]
    gap = [(a - b) for a, b in zip(matched, marginal)]
    assert m["retrieval_acc"] == pytest.approx((1 + 1 + 0.5) / 3)  # the tie counts half
    assert m["retrieval_chance"] == 0.5
    assert m["recall@2"] == 1.0 and m["recall@2_chance"] == 1.0
    assert m["mi_seq_est"] == pytest.approx(sum(gap) / 3, abs=1e-12)
    assert m["mi_est"] == pytest.approx((gap[0] / 2 + gap[1] / 3 + gap[2] / 5) / 3, abs=1e-12)
    assert m["h_cond"] == pytest.approx((2 / 2 + 3 / 3 + 5 / 5) / 3, abs=1e-12)
    assert m["h_cond_seq"] == pytest.approx(10 / 3, abs=1e-12)
    per_token = [marginal[0] / 2, marginal[1] / 3, marginal[2] / 5]
    mean = sum(per_token) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in per_token) / 3)  # population std
    assert marginal_spread(scores, lengths) == pytest.approx(std, abs=1e-12)
    assert m["mi_zscore"] == pytest.approx(m["mi_est"] / (std + 1e-3), abs=1e-12)


def test_recall_breaks_ties_uniformly():
    scores = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0]])
    owner = torch.tensor([1])  # one column above none, tied with two others
    assert [float(recall_at(scores, owner, k)) for k in (1, 2, 3, 4)] == pytest.approx([1 / 3, 2 / 3, 1, 1])
    below = torch.tensor([4])
    assert float(recall_at(scores, below, 4)) == 0.0 and float(recall_at(scores, below, 5)) == 1.0


def test_ema_starts_at_first_value_then_smooths():
    assert ema(None, 2.0, 0.9) == 2.0
    assert ema(2.0, 4.0, 0.9) == pytest.approx(0.9 * 2.0 + 0.1 * 4.0)


def _turn(context: list[int], reasoning: str = "z", response: str = "z </think> <answer> Up </answer>",
          ok: bool = True) -> Turn:
    return Turn(context="", response=response, reasoning=reasoning, answer="", actions=[],
                format_ok=ok, reward=0.0, context_ids=context, response_ids=[1])


def test_identical_prompts_share_one_column():
    columns, owners = assign_columns([[5, 6], [7], [5, 6], [7, 8]])
    assert columns == [[5, 6], [7], [7, 8]]
    assert owners == [0, 1, 0, 2]


class _StubRun:
    """Cross-scores through a hook that records what it was asked."""

    def __init__(self):
        self.asked = None
        self.world = World()  # one process: its share is every response
        run = self

        class Hook:
            def mirage_cross_score(self, run, contexts, responses):
                from mirage.core.rl.backend import CrossScores
                run.asked = (contexts, responses)
                # response r (token id 100 + c) matches context c only
                logprobs = torch.tensor([[0.0 if resp[0] - 100 == ctx[0] else -9.0 for ctx in contexts]
                                         for resp in responses], dtype=torch.float64)
                return CrossScores(logprobs, torch.ones_like(logprobs))

        self.hook = Hook()


def test_cross_score_dedups_prompts_and_skips_empty_reasonings():
    turns = [_turn([0]), _turn([1]), _turn([0]), _turn([2])]
    reasonings = [[100], [101], [100], []]  # turn 3's Z is empty: no row, still a column
    run = _StubRun()
    scored = cross_score(run, turns, reasonings)
    contexts, responses = run.asked
    assert contexts == [[0], [1], [2]] and responses == [[100], [101], [100]]
    assert scored.owners.tolist() == [0, 1, 0]
    m = mi_proxies(scored.logprobs, scored.lengths, scored.owners)
    assert m["retrieval_acc"] == 1.0 and m["retrieval_chance"] == 1 / 3
    assert cross_score(run, [_turn([0]), _turn([0])], [[100], [100]]) is None  # one prompt only


def _batch(returns: list[list[float]], wins: list[list[bool]] | None = None) -> Batch:
    groups = []
    for p, group_returns in enumerate(returns):
        trajectories = []
        for k, value in enumerate(group_returns):
            turn = _turn([p])
            turn.reward = value
            t = Trajectory(prompt_index=p, sample_index=k, seed=k, turns=[turn])
            t.success = wins[p][k] if wins else value > 0
            trajectories.append(t)
        groups.append(Group(prompt_index=p, seed=p, trajectories=trajectories))
    return Batch(step=3, groups=groups)


def test_reward_structure_counts_and_spreads():
    batch = _batch([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.5, -0.5]],
                   wins=[[False, False], [True, True], [False, True], [False, False]])
    m = reward_structure(batch)
    assert m["reward/zero_variance_groups"] == 2.0
    assert m["reward/hard_share"] == 0.5 and m["reward/easy_share"] == 0.25
    assert m["reward/mixed_share"] == 0.25
    stds = [0.0, 0.0, math.sqrt(0.5), math.sqrt(0.5)]
    assert m["reward/std_mean"] == pytest.approx(sum(stds) / 4)
    assert m["reward/std_min"] == 0.0 and m["reward/std_max"] == pytest.approx(math.sqrt(0.5))
    # in-group variances 0, 0, 0.5, 0.5 (unbiased: two returns 1 apart over G - 1 = 1)
    assert m["reward/variance_mean"] == pytest.approx(0.25)
    assert m["reward/variance_std"] == pytest.approx(0.25)  # population std of the four


def test_variance_buckets_rank_groups_into_six():
    stds = [0.5, 0.0, 0.9, 0.1, 0.3, 0.7, 0.2, 0.0]
    buckets = variance_buckets(stds)
    assert buckets == [[1, 7], [3], [6], [4, 0], [5], [2]]  # rank r -> r * 6 // 8
    assert variance_buckets([0.3, float("nan")]) == [[1], [], [], [0], [], []]


def test_trajectory_sample_is_reproducible_and_uniform_over_trajectories():
    batch = _batch([[0.0] * 4] * 4)
    first = sampled_turns(batch, 6, seed=1)
    assert len(first) == 6 and first == sampled_turns(batch, 6, seed=1)
    assert len(sampled_turns(batch, 99, seed=1)) == 16  # never more than there are trajectories


def test_collapse_rule_needs_k_checks_at_chance_with_entropy_up():
    rule = CollapseAlarmConfig(margin=0.05, checks=2, baseline_checks=2, entropy_ratio=0.9)
    state: dict = {}
    fired = [check_collapse(state, acc, 0.125, ent, rule) is not None for acc, ent in
             [(0.9, 2.0), (0.15, 2.0), (0.16, 2.1), (0.5, 2.0), (0.1, 2.0), (0.1, 1.0), (0.1, 2.0),
              (0.1, 2.0)]]
    # at chance: checks 2, 3 -> fires at 3; 4 breaks; 5 at chance; 6 entropy fell (1.0 < 1.8);
    # 7 and 8 at chance with entropy up -> fires at 8
    assert fired == [False, False, True, False, False, False, False, True]
    assert state["early_entropy"] == [2.0, 2.0]

"""The algorithms' pieces on hand-made numbers, each checked against a computation
written here (not by calling the same veRL function again)."""

import math

import pytest
import torch

from mirage.core.rl.batch import Trajectory, Turn
from mirage.core.run.validate import build_config
from mirage.plugins.verl_algorithms.common import actor_loss, critic_loss, token_weights
from mirage.plugins.verl_algorithms.dapo import overlong_penalty, turn_rewards
from mirage.plugins.verl_algorithms.outcome import group_advantages, outcome_rows
from mirage.plugins.verl_algorithms.ppo import gae, lay_out


def settings(algo: str, **extra):
    return build_config({"algorithm": {"name": algo, **extra}}).algorithm


def _turn(reward: float, length: int = 1) -> Turn:
    return Turn("x", "y", "z", "a", [], True, reward, [1], [2] * length)


def _trajectory(prompt: int, ret: float) -> Trajectory:
    return Trajectory(prompt_index=prompt, sample_index=0, seed=0, turns=[_turn(ret)])


# --------------------------------------------------------------------------- outcome advantages


@pytest.mark.parametrize("statistics", ["exact", "verl"])
def test_grpo_advantage_is_group_normalised(statistics):
    # MEASURED.md: rewards [1,0,1,0 | 0,0,1,1] give +-0.866 (std-normalised, unbiased std).
    returns = [1, 0, 1, 0, 0, 0, 1, 1]
    advantages = group_advantages(returns, [i // 4 for i in range(8)], True, statistics).tolist()
    std = math.sqrt(sum((r - 0.5) ** 2 for r in [1, 0, 1, 0]) / 3)
    expected = [(r - 0.5) / (std + 1e-6) for r in returns]
    assert advantages == pytest.approx(expected, abs=1e-5)
    assert abs(advantages[0]) == pytest.approx(0.866, abs=1e-3)


@pytest.mark.parametrize("statistics", ["exact", "verl"])
def test_dr_grpo_advantage_has_no_std(statistics):
    advantages = group_advantages([1, 0, 1, 0, 3, 1], [0, 0, 0, 0, 1, 1], False, statistics)
    assert advantages.tolist() == pytest.approx([0.5, -0.5, 0.5, -0.5, 1.0, -1.0])


def test_outcome_rows_copy_the_shaped_return_advantage_to_every_response_token():
    # Two trajectories of one group: 2 turns (3 + 1 tokens) and 1 turn (2 tokens); a turn
    # without response tokens is no row (nothing of it is trained).
    long = Trajectory(0, 0, 0, turns=[_turn(0.0, 3), _turn(0.0, 0), _turn(1.0, 1)])
    short = Trajectory(0, 1, 0, turns=[_turn(0.0, 2)])
    rows = outcome_rows([long, short], [0, 0], [[0.0, 0.0, 1.0], [0.0]], settings("drgrpo"))
    assert [[r.advantages.tolist() for r in turns] for turns in rows] == [
        [[0.5, 0.5, 0.5], [0.5]],
        [[-0.5, -0.5]],
    ]
    assert all(r.returns is None for turns in rows for r in turns)


# --------------------------------------------------------------------------- GAE over turns


def _gae_by_hand(rewards, values, gamma, lam):
    """Per trajectory: rewards at each turn's last token, TD errors with V after the last
    token = 0, A_t = sum_l (gamma lam)^l delta_{t+l} (closed form, not a recursion)."""
    advantages, returns = [], []
    for rewards_of_turns, turn_values in zip(rewards, values):
        r = [0.0] * sum(len(v) for v in turn_values)
        v = [x for turn in turn_values for x in turn]
        end = 0
        for reward, turn in zip(rewards_of_turns, turn_values):
            end += len(turn)
            r[end - 1] += reward
        delta = [r[t] + gamma * (v[t + 1] if t + 1 < len(v) else 0.0) - v[t] for t in range(len(v))]
        a = [sum((gamma * lam) ** k * delta[t + k] for k in range(len(v) - t)) for t in range(len(v))]
        advantages.append(a)
        returns.append([x + y for x, y in zip(a, v)])
    flat = [x for a in advantages for x in a]
    mean = sum(flat) / len(flat)
    var = sum((x - mean) ** 2 for x in flat) / (len(flat) - 1)
    whitened = [[(x - mean) / math.sqrt(var + 1e-8) for x in a] for a in advantages]
    return whitened, returns


# Trajectory 0 has two turns (2 and 1 response tokens; the environment's text between
# them is not in the sequence); trajectory 1 one turn of 3 tokens.
GAE_REWARDS = [[0.5, 1.0], [-0.1]]
GAE_VALUES = [[[0.1, 0.2], [0.3]], [[0.0, 0.5, -0.2]]]


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.9, 0.8)])
def test_gae_runs_over_the_concatenated_turns_of_a_trajectory(gamma, lam):
    values = [[torch.tensor(v) for v in turns] for turns in GAE_VALUES]
    advantages, returns = gae(GAE_REWARDS, values, gamma, lam)
    expected_adv, expected_ret = _gae_by_hand(GAE_REWARDS, GAE_VALUES, gamma, lam)
    assert [[a.numel() for a in turns] for turns in advantages] == [[2, 1], [3]]
    flat = lambda nested: [x for turns in nested for t in turns for x in t.tolist()]  # noqa: E731
    assert flat(advantages) == pytest.approx([x for a in expected_adv for x in a], abs=1e-5)
    assert flat(returns) == pytest.approx([x for r in expected_ret for x in r], abs=1e-5)


def test_gae_with_gamma_lambda_one_is_return_to_go_minus_value():
    values = [[torch.tensor(v) for v in turns] for turns in GAE_VALUES]
    _, returns = gae(GAE_REWARDS, values, 1.0, 1.0)
    # Return-to-go of trajectory 0: its first turn's tokens see both rewards, the second
    # turn's token only its own (an earlier turn's reward is not credited to later turns).
    assert torch.cat(returns[0]).tolist() == pytest.approx([1.5, 1.5, 1.0])
    assert returns[1][0].tolist() == pytest.approx([-0.1, -0.1, -0.1])


def test_layout_moves_an_empty_turns_reward_to_the_token_before_it():
    values = [[torch.zeros(2), torch.zeros(0), torch.zeros(1)], [torch.zeros(0), torch.zeros(2)]]
    rewards, _, mask = lay_out([[0.1, 0.2, 0.4], [0.3, 0.5]], values)
    assert rewards.flatten().tolist() == pytest.approx([0.0, 0.3, 0.4, 0.0, 0.8, 0.0])
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]


# --------------------------------------------------------------------------- policy and value loss

# Ratios and advantages chosen to sit on each side of the clip bounds.
RATIOS = [1.25, 1.3, 0.75, 0.7, 4.0]
SIGNS = [1.0, 1.0, -1.0, -1.0, -1.0]


def _clipped_by_hand(ratio, advantage, low, high, dual=3.0):
    term = max(-advantage * ratio, -advantage * min(max(ratio, 1 - low), 1 + high))
    return min(term, -advantage * dual) if advantage < 0 else term


@pytest.mark.parametrize("algo, low, high, clipped", [
    ("dapo", 0.2, 0.28, 3),  # clip-higher: 1.25 is inside [0.8, 1.28], 1.3 is not
    ("grpo", 0.2, 0.2, 4),
])
def test_actor_loss_uses_the_algorithms_clip_bounds(algo, low, high, clipped):
    algo_settings = settings(algo)
    assert (algo_settings.clip_ratio_low, algo_settings.clip_ratio_high) == (low, high)
    old = torch.zeros(1, 5)
    new = torch.log(torch.tensor([RATIOS]))
    weights = torch.tensor([[0.1, 0.2, 0.3, 0.2, 0.2]])
    mask = torch.ones(1, 5)
    loss, info = actor_loss(old, new, torch.tensor([SIGNS]) * 2.0, weights, mask, algo_settings)
    expected = sum(w * _clipped_by_hand(r, 2.0 * s, low, high)
                   for w, r, s in zip(weights[0].tolist(), RATIOS, SIGNS))
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert info["actor/pg_clipfrac"] == pytest.approx(clipped / 5)


def test_actor_loss_ignores_masked_tokens():
    algo_settings = settings("dapo")
    new = torch.log(torch.tensor([[1.3, 5.0], [0.7, 9.0]]))
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    loss, _ = actor_loss(torch.zeros(2, 2), new, torch.tensor([[1.0, 1.0], [-1.0, -1.0]]),
                         torch.full((2, 2), 0.5) * mask, mask, algo_settings)
    assert loss.item() == pytest.approx(0.5 * (-1.28) + 0.5 * 0.8, rel=1e-5)


def test_critic_loss_clips_values_around_the_old_ones():
    values = torch.tensor([[1.0, 0.0, 2.0], [0.4, 0.0, 0.0]])
    old = torch.tensor([[0.0, 0.0, 1.0], [0.5, 0.0, 0.0]])
    returns = torch.tensor([[0.2, 1.0, 2.0], [0.5, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    loss, clipfrac = critic_loss(values, old, returns, mask, value_clip=0.5, tokens=8)
    by_hand, clipped_count = 0.0, 0
    for v, o, r in [(1.0, 0.0, 0.2), (0.0, 0.0, 1.0), (2.0, 1.0, 2.0), (0.4, 0.5, 0.5)]:
        clipped = min(max(v, o - 0.5), o + 0.5)
        by_hand += max((v - r) ** 2, (clipped - r) ** 2)
        clipped_count += (clipped - r) ** 2 > (v - r) ** 2
    assert loss.item() == pytest.approx(0.5 * by_hand / 8, rel=1e-6)
    assert clipped_count == 1  # the third token: 2.0 may move only to 1.5, further from 2.0
    assert clipfrac == pytest.approx(clipped_count / 4)


# --------------------------------------------------------------------------- loss aggregation


def test_token_weights_make_each_trajectory_count_once():
    lengths = [[3, 1], [4], [0]]  # two turns (4 tokens), one turn (4 tokens), empty
    w = token_weights(lengths, "seq-mean-token-mean")
    # Two non-empty trajectories, each of 4 tokens: every token weighs 1 / (2 * 4).
    assert w == pytest.approx([1 / 8, 1 / 8, 0.0])
    assert token_weights([[2], [6]], "seq-mean-token-mean") == pytest.approx([1 / 4, 1 / 12])
    assert token_weights([[2], [6]], "token-mean") == pytest.approx([1 / 8, 1 / 8])
    assert token_weights([[2], [6]], "seq-mean-token-sum") == pytest.approx([1 / 2, 1 / 2])
    assert token_weights([[2], [6]], "token-sum") == [1.0, 1.0]
    with pytest.raises(ValueError, match="valid: token-mean"):
        token_weights([[1]], "bogus")


# --------------------------------------------------------------------------- DAPO overlong penalty


def test_overlong_penalty_is_linear_over_the_buffer():
    # Budget 40 tokens, buffer 8: nothing up to 32, then down to -penalty at 40.
    assert [overlong_penalty(n, 40, 8, 1.0) for n in (10, 32, 34, 36, 40)] == pytest.approx(
        [0.0, 0.0, -0.25, -0.5, -1.0])
    assert overlong_penalty(40, 40, 8, 0.5) == pytest.approx(-0.5)


def test_turn_rewards_add_the_penalty_per_turn_only_when_on():
    trajectory = Trajectory(0, 0, 0, turns=[_turn(0.0, 40), _turn(1.0, 36), _turn(0.5, 3)])
    dapo = settings("dapo")  # buffer resolved to 20% of max_new_tokens (40) = 8
    assert dapo.overlong_buffer == 8
    shaped, metrics = turn_rewards([trajectory], dapo, 40)
    assert shaped == [pytest.approx([-1.0, 0.5, 0.5])]
    assert metrics == {"update/overlong_turns": pytest.approx(2 / 3),
                       "update/overlong_penalty": pytest.approx(-1.5)}
    plain, metrics = turn_rewards([trajectory], settings("grpo"), 40)
    assert plain == [[0.0, 1.0, 0.5]] and metrics == {}

"""Countdown rules, rewards, parser, solver and demonstrators on hand-made cases."""

import random

import pytest

from mirage.core.config.run_config import EnvConfig
from mirage.core.rl.episode import apply_response, start_episode
from mirage.envs import arithmetic
from mirage.envs.countdown import Countdown, CountdownOptions


def scored(numbers, target, answer):
    env = Countdown().load(numbers, target)
    return env.score(answer)


@pytest.mark.parametrize("answer, reward", [
    ("(3 + 5) * 2", 1.0),
    ("( 3 + 5 ) * 2", 1.0),          # as the tiny policy writes it
    ("2 * (5 + 3)", 1.0),            # any order
    ("3 + 5 * 2", 0.1),              # all numbers once, value 13
    ("3 * 5 / (2 - 2 + 2)", 0.0),    # 2 used three times
    ("3 + 5", 0.0),                  # 2 unused
    ("(3 + 5) * 2 * 1", 0.0),        # a number not given
    ("35 * 2", 0.0),                 # digits glued: 35 is not given
    ("5 / (3 - 3) + 2", 0.0),        # 3 twice
    ("2 / (5 - 5) + 3", 0.0),
    ("(3 + 5) * ", 0.0),             # malformed
    ("16", 0.0),
    ("three plus five", 0.0),
    ("(3 + 5) ** 2", 0.0),
    ("", 0.0),
])
def test_rewards(answer, reward):
    assert scored([3, 5, 2], 16, answer) == reward


def test_division_by_zero_with_the_right_numbers_is_a_wrong_value():
    assert scored([4, 2, 2], 3, "4 / (2 - 2)") == 0.1
    assert scored([6, 3, 2], 1, "6 / 3 / 2") == 1.0  # exact fractions, left to right


def test_parser_values_and_errors():
    assert arithmetic.evaluate("10 - 4 - 3").value == 3
    assert arithmetic.evaluate("2 * (3 + 4)").numbers == (2, 3, 4)
    assert arithmetic.evaluate("7 / 2").value == pytest.approx(3.5)
    for bad in ("(1 + 2", "1 + + 2", "1 2", "-1 + 2", "1 = 1", "x"):
        with pytest.raises(arithmetic.ExpressionError):
            arithmetic.evaluate(bad)


def test_single_turn_through_the_turn_protocol():
    env, config = Countdown(), EnvConfig()
    state = start_episode(env, 5, config)
    expression = env.solve()[0]
    result = apply_response(state, f"I try it </think> <answer> {expression} </answer>", config)
    assert result.reward == 1.0 and result.done and env.success
    env2 = Countdown()
    state = start_episode(env2, 5, config)
    result = apply_response(state, "no answer tags", config)
    assert result.reward == config.format_penalty and not result.done and not env2.done


def test_generated_instances_are_solvable_and_in_range():
    env = Countdown(CountdownOptions(num_numbers=4, max_number=12, max_target=100))
    for seed in range(150):
        env.reset(seed)
        assert len(env.numbers) == 4 and all(1 <= n <= 12 for n in env.numbers)
        assert 1 <= env.target <= 100
        (expression,) = env.solve()
        assert env.score(expression) == 1.0


def test_solver_returns_none_when_impossible():
    assert Countdown().load([1, 1], 5).solve() is None


def test_careless_answer_is_left_to_right_plus_and_times():
    env = Countdown().load([2, 3, 4], 20)
    assert env.careless_answer() == "( 2 + 3 ) * 4"
    env = Countdown().load([9, 1, 1], 7)
    assert env.score(env.careless_answer()) == 0.1  # needs subtraction: the structured miss


def test_same_seed_same_instance_and_transitions():
    def play(seed):
        env = Countdown()
        obs = env.reset(seed)
        demo = env.demonstrator(random.Random(seed))
        turn = demo()
        return obs, turn, env.step(turn.actions[0])

    assert play(3) == play(3)
    assert len({play(s)[0] for s in range(30)}) > 20


def test_demonstrators_careful_beats_careless_and_reasoning_varies():
    rates, texts = {"careful": [], "careless": []}, set()
    for seed in range(300):
        env = Countdown()
        env.reset(seed)
        demo = env.demonstrator(random.Random(seed))
        turn = demo()
        texts.add(turn.reasoning)
        env.step(turn.actions[0])
        rates[demo.persona].append(env.success)
    careful = sum(rates["careful"]) / len(rates["careful"])
    careless = sum(rates["careless"]) / len(rates["careless"])
    assert careful > 0.8 and 0.1 < careless < careful - 0.3
    assert len(texts) > 100

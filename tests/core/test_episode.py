"""The turn protocol (mirage/core/rl/episode.py) on hand-built FrozenLake maps."""

from __future__ import annotations

import pytest

from mirage.core.config.run_config import EnvConfig
from mirage.core.rl.env import parse_response
from mirage.core.rl.episode import (
    THINK,
    EpisodeState,
    apply_response,
    build_context,
    format_response,
    start_episode,
)
from mirage.envs.frozenlake import FrozenLake

# P at (0, 0), a hole at (1, 1), the goal at (3, 3).
OPEN_MAP = ["P _ _ _", "_ O _ _", "_ _ _ _", "_ _ _ G"]


def answer(*actions: str, reasoning: str = "I go") -> str:
    return f"{reasoning} </think> <answer> {' || '.join(actions)} </answer>"


def episode(rows=OPEN_MAP, **config) -> tuple[EpisodeState, EnvConfig]:
    """An episode on a hand-built map (``start_episode`` would generate a random one)."""
    cfg = EnvConfig(name="frozenlake", **config)
    env = FrozenLake.from_grid(rows)
    budget = cfg.max_turns * cfg.max_actions_per_turn
    return EpisodeState(env=env, observation=env.render(), actions_left=budget), cfg


def test_start_episode_resets_the_env_and_sets_the_action_budget():
    cfg = EnvConfig(name="frozenlake", max_turns=3, max_actions_per_turn=2)
    env = FrozenLake()
    state = start_episode(env, seed=7, config=cfg)
    assert state.observation == env.render() == FrozenLake().reset(7)
    assert state.actions_left == 6
    assert state.history == [] and state.done is False


def test_context_ends_with_think_and_counts_actions_left():
    state, cfg = episode(max_turns=5, max_actions_per_turn=2)
    context = build_context(state, cfg)
    assert context.endswith(THINK)
    assert "You have 10 actions left" in context
    assert state.env.render() in context
    apply_response(state, answer("Right", "Right"), cfg)
    context = build_context(state, cfg)
    assert context.endswith("\n" + THINK)
    assert "You have 8 actions left" in context
    assert "_ _ P _" in context.splitlines()  # the state after the move


def test_context_shows_the_instruction_only_when_asked():
    state, cfg = episode(show_instruction=True, max_actions_per_turn=3)
    context = build_context(state, cfg)
    assert context.startswith(FrozenLake.instruction)
    assert "at most 3 actions" in context
    state, cfg = episode(show_instruction=False)
    assert FrozenLake.instruction not in build_context(state, cfg)


@pytest.mark.parametrize("history_turns, shown", [(0, []), (1, ["second"]), (-1, ["first", "second"])])
def test_context_shows_the_requested_history(history_turns, shown):
    state, cfg = episode(history_turns=history_turns)
    apply_response(state, answer("Right", reasoning="first"), cfg)
    apply_response(state, answer("Down", reasoning="second"), cfg)
    context = build_context(state, cfg)
    for word in ["first", "second"]:
        assert (f"{THINK} {word} </think>" in context) == (word in shown)
    assert context.endswith(THINK)


def test_valid_two_action_answer_steps_twice():
    state, cfg = episode(max_actions_per_turn=2)
    result = apply_response(state, answer("Right", "Right", reasoning="go right"), cfg)
    assert result.format_ok is True
    assert result.actions == ["Right", "Right"]
    assert result.reasoning == "go right"
    assert result.answer == "Right || Right"
    assert result.reward == 0.0 and result.done is False
    assert state.env.player == (0, 2)
    assert state.actions_left == 8
    assert state.observation == state.env.render()
    assert len(state.history) == 1 and state.history[0][2] == 0.0


def test_actions_are_matched_case_insensitively():
    state, cfg = episode()
    result = apply_response(state, answer("down", "RIGHT"), cfg)
    assert result.format_ok and result.actions == ["Down", "Right"]
    assert state.env.player == (1, 1) and state.done  # the hole at (1, 1)


@pytest.mark.parametrize(
    "response",
    [
        "no tags at all",
        "I go </think> Right",  # no answer tag
        "I go </think> <answer> Right",  # unclosed
        "I go </think> <answer>  </answer>",  # empty answer
        "I go </think> <answer> Right || </answer>",  # empty action
        "I go </think> <answer> Jump </answer>",  # invalid action name
        "I go </think> <answer> Right || Jump </answer>",  # one invalid action spoils all
    ],
)
def test_malformed_answer_costs_the_penalty_and_does_not_move(response):
    state, cfg = episode()
    result = apply_response(state, response, cfg)
    assert result.format_ok is False
    assert result.actions == []
    assert result.reward == pytest.approx(-0.1)
    assert state.env.player == (0, 0)
    assert state.actions_left == 10  # a malformed turn uses no actions
    assert len(state.history) == 1 and state.history[0][2] == pytest.approx(-0.1)
    assert result.done is False


def test_format_penalty_comes_from_the_config():
    state, cfg = episode(format_penalty=-0.5)
    assert apply_response(state, "nonsense", cfg).reward == pytest.approx(-0.5)


def test_only_the_first_max_actions_are_applied():
    state, cfg = episode(max_actions_per_turn=2)
    result = apply_response(state, answer("Right", "Right", "Right", "Down"), cfg)
    assert result.format_ok is True
    assert result.actions == ["Right", "Right"]
    assert state.env.player == (0, 2)
    assert state.actions_left == 8


def test_actions_stop_when_the_budget_runs_out():
    state, cfg = episode(max_turns=5, max_actions_per_turn=2)
    state.actions_left = 1
    result = apply_response(state, answer("Right", "Right"), cfg)
    assert result.actions == ["Right"]
    assert state.env.player == (0, 1)
    assert state.actions_left == 0 and result.done and state.done


def test_reaching_the_goal_ends_the_turn_and_the_episode():
    state, cfg = episode(rows=["P G _"], max_actions_per_turn=3)
    result = apply_response(state, answer("Right", "Right", "Left"), cfg)
    assert result.actions == ["Right"]  # nothing is applied after the episode ended
    assert result.reward == 1.0 and result.done is True
    assert state.done and state.env.success
    assert state.actions_left == 14  # 5 turns x 3 actions, one used


def test_falling_into_a_hole_ends_the_episode_without_success():
    state, cfg = episode(rows=["P O G"])
    result = apply_response(state, answer("Right", "Right"), cfg)
    assert result.actions == ["Right"] and result.reward == 0.0 and result.done
    assert state.done and not state.env.success


def test_episode_ends_after_max_turns():
    state, cfg = episode(max_turns=3, max_actions_per_turn=2)
    results = [apply_response(state, answer("Left"), cfg) for _ in range(3)]  # into the wall
    assert [r.done for r in results] == [False, False, True]
    assert state.done and len(state.history) == 3
    assert state.actions_left == 3  # the budget is not what ended it
    assert state.env.player == (0, 0)


def test_malformed_turns_also_count_towards_max_turns():
    state, cfg = episode(max_turns=2)
    assert apply_response(state, "garbage", cfg).done is False
    assert apply_response(state, "garbage", cfg).done is True


def test_format_response_round_trips_through_the_parser():
    text = format_response("the goal is down", ["Down", "Right"])
    parsed = parse_response(text)
    assert parsed.ok and parsed.reasoning == "the goal is down"
    assert parsed.answer == "Down || Right"
    state, cfg = episode()
    assert apply_response(state, text, cfg).actions == ["Down", "Right"]

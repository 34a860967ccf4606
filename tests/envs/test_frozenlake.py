"""Behaviour of the FrozenLake environment, checked on hand-built maps and generated ones."""

import random

import pytest
from pydantic import ValidationError

from mirage.envs.frozenlake import FrozenLake, FrozenLakeOptions
from mirage.envs.phrasing import demo_success_rates

OPEN_5X5 = ["_ _ _ _ _", "_ _ _ _ _", "_ _ P _ _", "_ _ _ _ _", "_ _ _ _ G"]


def outcomes_from_centre(slip, action="Up", trials=3000, seed=0):
    """Where one step from the centre of an open map lands, counted over many trials."""
    env = FrozenLake.from_grid(OPEN_5X5, FrozenLakeOptions(slip=slip), seed=seed)
    counts = {}
    for _ in range(trials):
        env.player = (2, 2)
        env.step(action)
        counts[env.player] = counts.get(env.player, 0) + 1
    return counts


def test_generated_maps_have_a_safe_path():
    env = FrozenLake()
    for seed in range(500):
        rows = env.reset(seed).split("\n")
        assert len(rows) == 6 and all(len(r.split(" ")) == 4 for r in rows[:4])
        start, goal = env.player, env.goal
        assert abs(start[0] - goal[0]) + abs(start[1] - goal[1]) >= 2
        assert start not in env.holes and goal not in env.holes
        plan = env.solve()
        assert plan is not None
        outs = [env.step(a) for a in plan]
        assert outs[-1].success and outs[-1].reward == 1.0


def test_hole_density_follows_hole_prob():
    env = FrozenLake(FrozenLakeOptions(hole_prob=0.0))
    for seed in range(20):
        env.reset(seed)
        assert not env.holes
    env = FrozenLake()
    counts = []
    for seed in range(300):
        env.reset(seed)
        counts.append(len(env.holes))
    holes = sum(counts) / (300 * 14)  # 14 cells besides start and goal
    assert 0.1 < holes < 0.25  # 0.2, a little lower since unsolvable maps are redrawn


def test_reset_is_deterministic():
    first = [FrozenLake().reset(s) for s in range(20)]
    assert first == [FrozenLake().reset(s) for s in range(20)]
    assert len(set(first)) > 15


def test_render_format():
    env = FrozenLake.from_grid(["P _ O", "_ O _", "_ _ G"])
    assert env.render() == (
        "P _ O\n_ O _\n_ _ G\nPlayer at row 0 col 0 . Goal at row 2 col 2 .\n"
        "Up : edge , Down : ice , Left : edge , Right : ice ."
    )
    env.player = (1, 2)
    assert env.render().endswith("Up : hole , Down : goal , Left : hole , Right : edge .")


def test_slip_frequency_matches_the_option():
    counts = outcomes_from_centre(0.3)
    intended, left, right = counts.get((1, 2), 0), counts.get((2, 1), 0), counts.get((2, 3), 0)
    assert intended + left + right == 3000  # never backwards, never in place
    assert abs((left + right) / 3000 - 0.3) < 0.035
    assert abs(left / 3000 - 0.15) < 0.03 and abs(right / 3000 - 0.15) < 0.03


def test_no_slip_and_full_slip():
    assert outcomes_from_centre(0.0, "Left", trials=500) == {(2, 1): 500}
    always = outcomes_from_centre(1.0, "Left", trials=500)
    assert set(always) == {(1, 2), (3, 2)}


def test_slip_is_deterministic_given_the_seed():
    def trajectory(seed):
        env = FrozenLake(FrozenLakeOptions(slip=0.5, hole_prob=0.0))
        env.reset(seed)
        cells = []
        for a in ["Up", "Left", "Down", "Right"] * 3:
            if env.done:
                break
            env.step(a)
            cells.append(env.player)
        return cells

    assert trajectory(4) == trajectory(4)
    assert len({tuple(trajectory(s)) for s in range(10)}) > 1


def test_hole_ends_the_episode_without_success():
    env = FrozenLake.from_grid(["P O _", "_ _ G"])
    out = env.step("Right")
    assert out.done and not out.success and out.reward == 0.0 and not env.success
    with pytest.raises(ValueError, match="over"):
        env.step("Down")


def test_goal_gives_reward_one_and_border_keeps_position():
    env = FrozenLake.from_grid(["P _ G", "_ _ _"])
    out = env.step("Up")
    assert env.player == (0, 0) and out.reward == 0.0 and not out.done
    assert env.step("Right").reward == 0.0
    out = env.step("Right")
    assert out.reward == 1.0 and out.done and out.success and env.success


def test_solver_avoids_holes():
    env = FrozenLake.from_grid(["P O _", "_ O _", "_ _ G"])
    assert env.solve() == ["Down", "Down", "Right", "Right"]
    assert FrozenLake.from_grid(["P O G"]).solve() is None


def test_greedy_plan_goes_vertical_first_and_ignores_holes():
    env = FrozenLake.from_grid(["P O _", "_ O _", "_ _ G"])
    assert env.greedy_plan() == ["Down", "Down", "Right", "Right"]
    env = FrozenLake.from_grid(["P _ _", "O _ _", "_ _ G"])
    assert env.greedy_plan()[0] == "Down"  # straight into the hole


def test_options_validation():
    assert FrozenLakeOptions() == FrozenLakeOptions(size=4, hole_prob=0.2, slip=0.0)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValidationError):
            FrozenLakeOptions(slip=bad)


def test_invalid_action_and_parse_actions():
    env = FrozenLake.from_grid(["P _ G"])
    with pytest.raises(ValueError, match="Up, Down, Left, Right"):
        env.step("North")
    assert env.parse_actions("DOWN||left") == ["Down", "Left"]
    assert env.parse_actions("") is None and env.parse_actions("Down || ") is None


def test_demonstrator_persona_success_rates():
    rates = demo_success_rates(FrozenLake, FrozenLakeOptions(slip=0.0), episodes=400)
    print("frozenlake demonstrator success by persona (slip 0):", rates)
    assert rates["careful"] > 0.9
    assert 0.3 <= rates["careless"] <= rates["careful"] - 0.15


def test_demonstrators_never_take_a_second_move_into_a_hole():
    """Version 3 demonstrations: a careless mistake is always a visible one."""
    env = FrozenLake()
    firsts = 0
    for seed in range(150):
        env.reset(seed)
        demo = env.demonstrator(random.Random(seed), persona="careless")
        for _ in range(10):
            if env.done:
                break
            turn = demo()
            if len(turn.actions) == 2:
                after_first = env._moved(env.player, turn.actions[0])
                assert env._moved(after_first, turn.actions[1]) not in env.holes
            firsts += env._moved(env.player, turn.actions[0]) in env.holes
            for action in turn.actions:
                if not env.done:
                    env.step(action)
    assert firsts > 10  # the careless persona still steps onto holes it can see

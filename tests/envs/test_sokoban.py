"""Behaviour of the Sokoban environment, checked on hand-built rooms and generated ones."""

import random

import pytest
from pydantic import ValidationError

from mirage.envs.phrasing import demo_success_rates
from mirage.envs.sokoban import Sokoban, SokobanOptions

OPEN_ROOM = [
    "# # # # # #",
    "# _ _ _ _ #",
    "# _ P X _ #",
    "# _ _ _ _ #",
    "# _ _ O _ #",
    "# # # # # #",
]


def play(env, actions):
    return [env.step(a) for a in actions]


def test_walking_away_from_a_box_never_pulls_it():
    env = Sokoban.from_grid(OPEN_ROOM)
    out = env.step("Left")
    assert env.player == (2, 1) and env.boxes == {(2, 3)}
    assert out.reward == pytest.approx(-0.1) and not out.done


def test_push_into_wall_or_box_and_step_into_wall_are_no_ops():
    env = Sokoban.from_grid(["# # # # #", "# P X # #", "# _ _ O #", "# # # # #"])
    assert env.step("Right").reward == pytest.approx(-0.1)
    assert env.player == (1, 1) and env.boxes == {(1, 2)}
    assert env.step("Up").reward == pytest.approx(-0.1) and env.player == (1, 1)
    two = Sokoban.from_grid(["# # # # # #", "# P X X _ #", "# _ _ O O #", "# # # # # #"])
    two.step("Right")
    assert two.player == (1, 1) and two.boxes == {(1, 2), (1, 3)}


def test_push_moves_box_and_player():
    env = Sokoban.from_grid(OPEN_ROOM)
    env.step("Right")
    assert env.player == (2, 3) and env.boxes == {(2, 4)}


def test_reward_accounting_on_a_two_box_room():
    env = Sokoban.from_grid([
        "# # # # # # #",
        "# _ _ _ _ _ #",
        "# P V _ _ _ #",
        "# _ _ _ X O #",
        "# # # # # # #",
    ])
    actions = ["Right", "Left", "Up", "Right", "Right", "Right", "Down", "Left", "Down", "Right"]
    outs = play(env, actions)
    rewards = [o.reward for o in outs]
    assert rewards[0] == pytest.approx(-1.1)  # box pushed off its target
    assert env.success and outs[-1].done and outs[-1].success
    assert rewards[7] == pytest.approx(0.9)  # pushed back onto the target
    assert rewards[-1] == pytest.approx(10.9)  # last box on target: +1 +10 -0.1
    assert all(r == pytest.approx(-0.1) for i, r in enumerate(rewards) if i not in (0, 7, 9))
    assert sum(rewards) == pytest.approx(10.0)
    assert not any(o.done for o in outs[:-1])
    with pytest.raises(ValueError, match="over"):
        env.step("Up")


def test_solver_finds_a_shortest_solution():
    env = Sokoban.from_grid([
        "# # # # # #",
        "# _ _ _ _ #",
        "# S X _ _ #",
        "# _ _ _ _ #",
        "# # # # # #",
    ])
    plan = env.solve()
    assert plan is not None and len(plan) == 5  # walk round the box (4) + one push
    outs = play(env, plan)
    assert outs[-1].success and env.boxes == {(2, 1)}
    assert sum(o.reward for o in outs) == pytest.approx(5 * -0.1 + 11)


def test_solver_returns_none_on_a_corner_deadlock():
    env = Sokoban.from_grid(["# # # # #", "# X _ _ #", "# _ P O #", "# # # # #"])
    assert env.solve() is None


def test_render_format():
    env = Sokoban.from_grid(OPEN_ROOM)
    lines = env.render().split("\n")
    assert lines[:6] == OPEN_ROOM
    assert lines[6] == "Player at row 2 col 2 . Box at row 2 col 3 . Target at row 4 col 3 ."
    assert lines[7] == "Box : 1 right . Target : 2 down from the box ."
    assert lines[8] == "Up : floor , Down : floor , Left : floor , Right : box ."
    corner = Sokoban.from_grid(["# # # # #", "# P _ _ #", "# _ _ X #", "# O _ _ #", "# # # # #"])
    assert corner.render().split("\n")[-2:] == [
        "Box : 1 down 2 right . Target : 1 down 2 left from the box .",
        "Up : wall , Down : floor , Left : wall , Right : floor .",
    ]
    on_target = Sokoban.from_grid(["# # # # #", "# S V _ #", "# _ X _ #", "# # # # #"])
    assert on_target.render().split("\n")[1] == "# S V _ #"


def test_generated_rooms_are_solvable_within_the_budget():
    env = Sokoban()
    for seed in range(150):
        obs = env.reset(seed)
        rows = obs.split("\n")
        assert len(rows) == 9 and rows[0] == "# # # # # #"
        assert len(env.boxes) == 1 and env.boxes != env.targets
        plan = env.solve()
        assert plan is not None and 5 <= len(plan) <= 10
        assert play(env, plan)[-1].success


def test_reset_is_deterministic():
    first = [Sokoban().reset(s) for s in range(20)]
    assert first == [Sokoban().reset(s) for s in range(20)]
    assert len(set(first)) > 15


def test_options_validation():
    assert SokobanOptions().size == 6 and SokobanOptions().num_boxes == 1
    with pytest.raises(ValidationError):
        SokobanOptions(min_solution_length=8, max_solution_length=4)
    with pytest.raises(ValidationError):
        SokobanOptions(bogus=1)


def test_invalid_action_and_parse_actions():
    env = Sokoban.from_grid(OPEN_ROOM)
    with pytest.raises(ValueError, match="Up, Down, Left, Right"):
        env.step("Jump")
    assert env.parse_actions("up || Right") == ["Up", "Right"]
    assert env.parse_actions("Up || Jump") is None


def test_greedy_plan_pushes_along_the_longer_axis_first():
    env = Sokoban.from_grid([
        "# # # # # #",
        "# _ _ _ _ #",
        "# _ X _ _ #",
        "# P _ _ _ #",
        "# _ _ O _ #",
        "# # # # # #",
    ])
    assert env.greedy_plan() == ["Up", "Up", "Right", "Down", "Down"]
    stuck = Sokoban.from_grid(["# # # # # #", "# _ X _ _ #", "# P _ _ _ #", "# _ O _ _ #",
                               "# # # # # #"])
    assert stuck.greedy_plan() is None  # cannot stand above a box on the top wall


def test_demonstrator_is_deterministic_and_persona_can_be_forced():
    def run(persona=None):
        env = Sokoban()
        env.reset(3)
        demo = env.demonstrator(random.Random(9), persona)
        return demo.persona, [demo() for _ in range(2)]

    assert run() == run()
    assert run("careless")[0] == "careless" and run("careful")[0] == "careful"
    with pytest.raises(ValueError):
        run("lazy")


def test_demonstrator_persona_success_rates():
    rates = demo_success_rates(Sokoban, episodes=300)
    print("sokoban demonstrator success by persona:", rates)
    assert rates["careful"] >= 0.8
    assert 0.3 <= rates["careless"] <= rates["careful"] - 0.1

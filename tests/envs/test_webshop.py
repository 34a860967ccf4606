"""WebShop simulator: pages, clicks, the attribute/option/price reward, step limit."""

import random

import pytest

from mirage.envs import shop
from mirage.envs.webshop import WebShop, WebShopOptions

GOAL = shop.Goal("mug", frozenset({"ceramic", "insulated"}), {"color": "red"}, 30,
                 "i want a ceramic insulated mug with color red , price lower than 30 dollars")


def product(**changes):
    base = dict(id="item0", category="mug", title="acme ceramic insulated mug",
                attributes=frozenset({"ceramic", "insulated"}), options={"color": ("red", "white")}, price=20)
    return shop.Product(**{**base, **changes})


@pytest.mark.parametrize("item, selected, reward", [
    (product(), {"color": "red"}, 1.0),
    (product(), {}, 0.75),                                  # option not selected
    (product(), {"color": "white"}, 0.75),                  # wrong option
    (product(price=45), {"color": "red"}, 0.75),            # over budget
    (product(attributes=frozenset({"ceramic"})), {"color": "red"}, 0.75),
    (product(category="lamp"), {"color": "red"}, 0.0),      # wrong type
])
def test_webshop_reward(item, selected, reward):
    env = WebShop().load(GOAL)
    assert env.score(item, selected) == pytest.approx(reward)


def test_a_full_episode_through_the_pages():
    env = WebShop()
    env.reset(7)
    plan = env.solve()
    assert plan[0].startswith("search[") and plan[-1] == "click[buy now]"
    env.step(plan[0])
    assert env.page == "results" and "Actions : click [ ITEM ]" in env.render()
    env.step(plan[1])
    assert env.page == "item" and "selected none" in env.render()
    outs = [env.step(a) for a in plan[2:]]
    assert outs[-1].reward == 1.0 and outs[-1].done and env.success
    assert all(o.reward == 0.0 and not o.done for o in outs[:-1])


def test_invalid_clicks_change_nothing_and_back_works():
    env = WebShop()
    env.reset(3)
    before = env.render()
    assert env.step("click[buy now]").reward == 0.0 and env.render() == before
    env.step(f"search[{env.canonical_query()}]")
    env.step("click[item99999]")
    assert env.page == "results"
    env.step("click[back to search]")
    assert env.page == "search"


def test_buying_without_options_gives_partial_reward():
    env = WebShop()
    env.reset(5)
    plan = env.solve()
    env.step(plan[0])
    env.step(plan[1])
    out = env.step("click[buy now]")
    assert out.done and 0 < out.reward < 1 and not out.success


def test_step_limit_ends_the_episode():
    env = WebShop(WebShopOptions(max_steps=3))
    env.reset(0)
    outs = [env.step("search[anything]") for _ in range(3)]
    assert outs[-1].done and outs[-1].reward == 0.0 and not any(o.done for o in outs[:-1])


def test_parse_actions():
    env = WebShop()
    assert env.parse_actions("click [ buy  now ]") == ["click[buy now]"]
    assert env.parse_actions("search[red mug] || click[item3]") == ["search[red mug]", "click[item3]"]
    assert env.parse_actions("buy[item3]") is None and env.parse_actions("click") is None


def test_reference_reaches_full_score_on_generated_goals():
    env = WebShop()
    for seed in range(150):
        env.reset(seed)
        for action in env.solve():
            env.step(action)
        assert env.success and env.reward == 1.0


def test_same_seed_same_goal_and_transitions():
    def play(seed):
        env = WebShop()
        obs = env.reset(seed)
        demo = env.demonstrator(random.Random(seed))
        trace = []
        while not env.done:
            turn = demo()
            trace.append((turn, env.step(turn.actions[0]), env.render()))
        return obs, trace

    assert play(2) == play(2)
    assert len({play(s)[0] for s in range(20)}) > 15


def test_careless_persona_skips_options():
    rewards = {"careful": [], "careless": []}
    for seed in range(150):
        env = WebShop()
        env.reset(seed)
        demo = env.demonstrator(random.Random(seed))
        while not env.done:
            env.step(demo().actions[0])
        rewards[demo.persona].append(env.reward)
    assert sum(rewards["careful"]) / len(rewards["careful"]) > 0.9
    assert sum(rewards["careless"]) / len(rewards["careless"]) < 0.8

"""The grid environments' demonstrators (FrozenLake, Sokoban) write valid, varied turns
whose reasoning describes the state without naming the moves."""

import random
import re

import pytest

from mirage.envs.frozenlake import FrozenLake
from mirage.envs.phrasing import ACTIONS as ACTION_NAMES
from mirage.envs.sokoban import Sokoban


@pytest.mark.parametrize("env_cls, episodes", [(FrozenLake, 80), (Sokoban, 60)])
def test_demonstrator_turns_are_valid_and_varied(env_cls, episodes):
    env = env_cls()
    texts, mentions_row, turns = set(), 0, 0
    for seed in range(episodes):
        env.reset(seed)
        demo = env.demonstrator(random.Random(seed))
        for _ in range(5):
            if env.done:
                break
            turn = demo()
            turns += 1
            assert 1 <= len(turn.actions) <= 2 and set(turn.actions) <= set(env_cls.action_names)
            tokens = turn.reasoning.split(" ")
            assert 4 <= len(tokens) <= 24
            assert all(re.fullmatch(r"[A-Za-z0-9]+|[.,;:]", t) for t in tokens), turn.reasoning
            texts.add(turn.reasoning)
            mentions_row += "row" in tokens
            assert not set(tokens) & set(ACTION_NAMES), turn.reasoning  # never names the moves
            for action in turn.actions:
                if not env.done:
                    env.step(action)
    assert len(texts) > turns // 3
    # about the state: cells named in all but the generic turns (8% by default)
    assert 0.8 < mentions_row / turns < 0.99

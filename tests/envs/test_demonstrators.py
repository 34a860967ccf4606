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


@pytest.mark.parametrize("env_cls", [FrozenLake, Sokoban])
def test_generic_grammar_says_many_input_agnostic_sentences(env_cls):
    """generic_style grammar: every generic turn is composed from the environment's grammar
    (thousands of sentences, none naming a move), the same for any map."""
    from mirage.envs.phrasing import grammar_size

    options = env_cls.Options(generic_share=1.0, generic_style="grammar")
    by_seed = {}
    for seed in range(40):
        env = env_cls(options)
        env.reset(seed)
        turns = [env.demonstrator(random.Random(7)).reasoning([]) for _ in range(1)]
        by_seed[seed] = turns[0]
        tokens = turns[0].split(" ")
        assert not set(tokens) & set(ACTION_NAMES) and "row" not in tokens, turns[0]
    # the same random stream gives the same sentence on every map: input-agnostic
    assert len(set(by_seed.values())) == 1
    demo = env_cls(options).demonstrator(random.Random(0))
    said = {demo.reasoning([]) for _ in range(400)}
    assert len(said) > 300 and grammar_size(type(demo).generic_grammar) > 4000
    # the default keeps the few fixed sentences
    fixed = env_cls(env_cls.Options(generic_share=1.0)).demonstrator(random.Random(0))
    assert {fixed.reasoning([]) for _ in range(200)} <= set(type(fixed).generic_templates)


def test_hidden_neighbour_line_is_read_out_by_the_reasoning():
    """FrozenLake neighbours false: the prompt loses its last line and every state turn's
    reasoning says what lies one step away in each direction, which the move depends on."""
    shown, hidden = FrozenLake(), FrozenLake(FrozenLake.Options(neighbours=False, generic_share=0.0))
    for seed in range(20):
        full, short = shown.reset(seed), hidden.reset(seed)
        line = full.splitlines()[-1]
        assert line.startswith("Up : ") and short.splitlines() == full.splitlines()[:-1]
        reasoning = hidden.demonstrator(random.Random(seed))().reasoning
        assert reasoning.startswith(line), (reasoning, line)

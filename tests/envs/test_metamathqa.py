"""MetaMathQA-style math: attempts, halving rewards, answer matching, generator, loader."""

import json
import random

import pytest
from pydantic import ValidationError

from mirage.envs import wordproblems
from mirage.envs.metamathqa import FEEDBACK, MetaMathQA, MetaMathQAOptions, is_correct, load_metamathqa


def test_reward_halves_per_attempt_and_feedback_is_shown():
    env = MetaMathQA().load("What is 6 times 7 ?", "42")
    first = env.step("41")
    assert (first.reward, first.done, first.success) == (0.0, False, False)
    assert env.render().endswith("Your answer : 41 .\n" + FEEDBACK)
    assert env.step("40").reward == 0.0
    last = env.step("42")
    assert (last.reward, last.done, last.success) == (0.25, True, True)
    assert MetaMathQA().load("q", "42").step("42").reward == 1.0
    second = MetaMathQA().load("q", "42")
    second.step("7")
    assert second.step("42").reward == 0.5


def test_attempts_run_out():
    env = MetaMathQA(MetaMathQAOptions(max_attempts=2)).load("q", "3")
    env.step("1")
    out = env.step("2")
    assert out.done and not out.success and out.reward == 0.0
    with pytest.raises(ValueError, match="over"):
        env.step("3")


@pytest.mark.parametrize("given, expected, ok", [
    ("42", "42", True), ("4 2", "42", True), ("42.0", "42", True), ("1,200", "1200", True),
    ("0.5", "1/2", True), ("\\boxed{7}", "7", True), ("$ 7", "7", True), ("7 .", "7", True),
    ("41", "42", False), ("forty two", "42", False), ("", "42", False), ("42 apples", "42", False),
    ("x = 3", "x=3", True), ("B", "b", True), ("C", "B", False),
])
def test_answer_matching(given, expected, ok):
    assert is_correct(given, expected) is ok


def test_generator_families_have_exact_answers_and_structured_mistakes():
    rng = random.Random(0)
    seen = set()
    for _ in range(300):
        problem = wordproblems.generate(rng, 9)
        seen.add(problem.family)
        assert problem.answer >= 0 and problem.question.endswith("?")
        assert str(problem.answer) in problem.steps.split()
        if problem.family != "add":
            assert problem.careless_answer != problem.answer
    assert seen == set(wordproblems.FAMILIES)
    share = wordproblems.generate(random.Random(3), 9, ("share",))
    total = int(share.question.split()[2])
    assert share.answer * int(share.question.split()[6]) == total


def test_unknown_family_is_refused():
    with pytest.raises(ValidationError, match="valid"):
        MetaMathQAOptions(families=("calculus",))


def test_same_seed_same_problem_and_transitions():
    def play(seed):
        env = MetaMathQA()
        obs = env.reset(seed)
        demo = env.demonstrator(random.Random(seed), "careless")
        outs = []
        while not env.done:
            turn = demo()
            outs.append((turn, env.step(turn.actions[0]), env.render()))
        return obs, outs

    assert play(11) == play(11)
    assert len({play(s)[0] for s in range(30)}) > 25


def test_careless_persona_succeeds_on_the_retry():
    rewards = {"careful": [], "careless": []}
    for seed in range(200):
        env = MetaMathQA()
        env.reset(seed)
        demo = env.demonstrator(random.Random(seed))
        total = 0.0
        while not env.done:
            total += env.step(demo().actions[0]).reward
        rewards[demo.persona].append(total)
    careful = sum(rewards["careful"]) / len(rewards["careful"])
    careless = sum(rewards["careless"]) / len(rewards["careless"])
    assert careful > 0.85 and 0.5 < careless < careful - 0.2


def test_loader_reads_metamathqa_json_and_jsonl(tmp_path):
    records = [
        {"query": "What is 2 + 3?", "response": "2 + 3 = 5.\nThe answer is: 5", "type": "GSM_AnsAug"},
        {"query": "Half of 1?", "response": "It is a half. The answer is: \\frac{1}{2}", "type": "MATH_SV"},
    ]
    data = tmp_path / "MetaMathQA-395K.json"
    data.write_text(json.dumps(records))
    lines = tmp_path / "mm.jsonl"
    lines.write_text("\n".join(json.dumps(r) for r in records))
    assert load_metamathqa(str(data)) == load_metamathqa(str(lines)) == (
        ("What is 2 + 3?", "5"), ("Half of 1?", "\\frac{1}{2}"))
    env = MetaMathQA(MetaMathQAOptions(data_path=str(data)))
    questions = {env.reset(seed).split("\n")[0] for seed in range(20)}
    assert questions == {"Question : What is 2 + 3?", "Question : Half of 1?"}
    env.load("What is 2 + 3?", "5")
    assert env.solve() == ["5"] and env.step("5").reward == 1.0


def test_loader_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"query": "q", "response": "no final answer"}]))
    with pytest.raises(ValueError, match="bad.json: record 0"):
        load_metamathqa(str(bad))
    with pytest.raises(ValidationError, match="no such file"):
        MetaMathQAOptions(data_path=str(tmp_path / "missing.json"))

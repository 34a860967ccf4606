"""SearchQA: actions, BM25 retrieval, EM/F1 reward, synthetic KB, user corpus loader."""

import json
import random

import pytest
from pydantic import ValidationError

from mirage.envs.retrieval import BM25Index
from mirage.envs.searchqa import SearchQA, SearchQAOptions, answer_matches


def test_parse_actions_accepts_search_and_finish_only():
    env = SearchQA()
    assert env.parse_actions("search [ Kalo  Ruven ]") == ["search[Kalo Ruven]"]
    assert env.parse_actions("Search[a] || finish[b]") == ["search[a]", "finish[b]"]
    for bad in ("lookup[x]", "search x", "finish[]", "search[a] ||", ""):
        assert env.parse_actions(bad) is None


@pytest.mark.parametrize("given, gold, ok", [
    ("Paris", "paris", True), ("the Paris", "Paris", True), ("Quillon", "Quillon Labs", True),
    ("Labs of the big quiet north", "Quillon Labs", False),  # F1 = 2/7 < 0.3
    ("Rome", "Paris", False), ("", "Paris", False),
])
def test_exact_match_or_f1(given, gold, ok):
    assert answer_matches(given, gold) is ok


def test_two_hop_episode_and_rewards():
    env = SearchQA()
    for seed in range(200):
        env.reset(seed)
        if env.question.bridge:
            break
    hops = env.question.hops
    assert env.step(f"search[{hops[0]}]").reward == 0.0
    assert env.question.bridge in env.render()  # the first document names the bridge entity
    env.step(f"search[{hops[1]}]")
    assert env.question.answer in env.render()
    out = env.step(f"finish[{env.question.answer}]")
    assert (out.reward, out.done, out.success) == (1.0, True, True)
    wrong = SearchQA().load(env.question)
    assert wrong.step(f"finish[{env.question.bridge}]").reward == 0.0


def test_reference_solves_every_question_through_retrieval():
    env = SearchQA()
    for seed in range(200):
        env.reset(seed)
        for action in env.solve():
            env.step(action)
        assert env.success, env.question


def test_bm25_ranks_the_matching_document_first():
    index = BM25Index(["Kalo is a city in Feldmark .", "Ruvo works in Kalo .", "Tea is made in Dana ."])
    assert index.search("Feldmark", 3) == [0]
    assert index.search("Kalo city", 2)[0] == 0
    assert index.search("the of", 3) == [] and index.search("unknownword", 3) == []


def test_same_seed_same_question_and_results():
    def play(seed):
        env = SearchQA()
        obs = env.reset(seed)
        return obs, [(env.step(a), env.render()) for a in env.solve()]

    assert play(4) == play(4)
    assert len({play(s)[0] for s in range(30)}) > 20


def test_careless_persona_answers_the_bridge():
    rates = {"careful": [], "careless": []}
    for seed in range(200):
        env = SearchQA()
        env.reset(seed)
        demo = env.demonstrator(random.Random(seed))
        for _ in range(5):
            if env.done:
                break
            env.step(demo().actions[0])
        rates[demo.persona].append(env.success)
    careful = sum(rates["careful"]) / len(rates["careful"])
    careless = sum(rates["careless"]) / len(rates["careless"])
    assert careful > 0.8 and careless < careful - 0.2


def test_user_corpus_and_questions(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in [
        {"id": "0", "contents": "\"Eiffel Tower\"\nThe Eiffel Tower is in Paris."},
        {"title": "Colosseum", "text": "The Colosseum is in Rome."},
    ]))
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps(r) for r in [
        {"question": "Where is the Colosseum?", "golden_answers": ["Rome", "Roma"]},
    ]))
    options = SearchQAOptions(corpus_path=str(corpus), questions_path=str(questions), top_k=1)
    env = SearchQA(options)
    env.reset(0)
    env.step("search[Colosseum]")
    assert "Doc 1 : Colosseum : The Colosseum is in Rome." in env.render()
    assert env.step("finish[Roma]").success
    env.reset(1)
    assert env.solve() == ["search[Where is the Colosseum?]", "finish[Rome]"]


def test_user_files_must_come_together_and_exist(tmp_path):
    with pytest.raises(ValidationError, match="go together"):
        SearchQAOptions(corpus_path=str(tmp_path))
    with pytest.raises(ValidationError, match="no such file"):
        SearchQAOptions(corpus_path="/nonexistent.jsonl", questions_path="/nonexistent.jsonl")

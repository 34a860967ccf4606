"""SearchQA: answer a question by searching a local corpus, ``search[query]`` then
``finish[answer]``.

``search[q]`` shows the ``top_k`` documents BM25 ranks best for ``q`` (reward 0);
``finish[a]`` ends the episode with reward 1 if ``a`` matches an answer exactly or with
token F1 >= 0.3 (after lowercasing and removing punctuation and articles), else 0.
The corpus and questions come from a seeded synthetic knowledge base
(``mirage/envs/knowledge.py``), or from the user's files: ``corpus_path`` (JSON lines,
``{"contents": ...}`` or ``{"title": ..., "text": ...}``) and ``questions_path`` (JSON
list or lines of ``{"question": ..., "answer": ... | "answers": [...] |
"golden_answers": [...]}``).
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections import Counter
from pathlib import Path

from pydantic import Field, model_validator

from mirage.core.rl.env import Demonstrator, StepOutcome
from mirage.envs import knowledge
from mirage.envs.answer import (
    AnswerEnvironment,
    AnswerOptions,
    BracketActions,
    PersonaAnswerDemonstrator,
    read_records,
    split_action,
)
from mirage.envs.retrieval import BM25Index

F1_THRESHOLD = 0.3

_TEMPLATES = [
    "I should search for {query} .",
    "Let me look up {query} .",
    "The question asks about {topic} .",
    "Search first , then answer .",
    "The document says {found} .",
    "So the answer is {answer} .",
    "I found {found} , that answers it .",
    "Next I need {query} .",
]


class SearchQAOptions(AnswerOptions):
    """Retrieval depth, the synthetic knowledge base's size, or the user's files."""

    top_k: int = Field(3, ge=1, le=20)
    kb_seed: int = 0
    people: int = Field(60, ge=4, le=5000)
    corpus_path: str | None = None
    questions_path: str | None = None

    @model_validator(mode="after")
    def _paths_together(self) -> SearchQAOptions:
        if (self.corpus_path is None) != (self.questions_path is None):
            raise ValueError("corpus_path and questions_path go together")
        for path in (self.corpus_path, self.questions_path):
            if path is not None and not Path(path).is_file():
                raise ValueError(f"no such file: {path}")
        return self


class SearchQA(BracketActions, AnswerEnvironment):
    """Multi-turn search QA; see the module docstring for the rules."""

    name = "searchqa"
    version = "1"
    Options = SearchQAOptions
    verbs = ("search", "finish")
    instruction = (
        "SearchQA : answer the question . Use search [ query ] to read documents and "
        "finish [ answer ] to answer ."
    )

    options: SearchQAOptions

    def __init__(self, options: SearchQAOptions | None = None):
        super().__init__(options)
        self.corpus = _corpus(self.options.kb_seed, self.options.people,
                              self.options.corpus_path, self.options.questions_path)
        self.load(self.corpus.questions[0])

    def load(self, question: knowledge.Question) -> SearchQA:
        self.question = question
        self.results: list[int] = []
        self.query: str | None = None
        self.searches: list[str] = []
        self.done = self._success = False
        return self

    def reset(self, seed: int) -> str:
        rng = random.Random(f"searchqa:{seed}")
        return self.load(self.corpus.questions[rng.randrange(len(self.corpus.questions))]).render()

    def step(self, action: str) -> StepOutcome:
        """``search[q]`` or ``finish[a]`` (as ``parse_actions`` returns them)."""
        self._check_open()
        verb, argument = split_action(action)
        if verb == "search":
            self.query, self.results = argument, self.corpus.index.search(argument, self.options.top_k)
            self.searches.append(argument)
            return StepOutcome(reward=0.0, done=False, success=False)
        if verb != "finish":
            raise ValueError(f"invalid action {action!r}; valid: search[...], finish[...]")
        self.done = True
        self._success = any(answer_matches(argument, gold) for gold in _answers(self.question.answer))
        return StepOutcome(reward=float(self._success), done=True, success=self._success)

    def render(self) -> str:
        lines = [f"Question : {self.question.text}"]
        if self.query is not None:
            lines.append(f"Results for {self.query} :")
            lines += [f"Doc {rank} : {self.corpus.index.texts[d]}" for rank, d in enumerate(self.results, 1)]
            if not self.results:
                lines.append("No document matches .")
        return "\n".join(lines)

    def solve(self) -> list[str] | None:
        """The reference: one search per hop still to do, then the answer."""
        hops = self.question.hops or (self.question.text,)  # a user's question: search it as is
        remaining = hops[len(self.searches):]
        return [f"search[{q}]" for q in remaining] + [f"finish[{_answers(self.question.answer)[0]}]"]

    def demonstrator(self, rng: random.Random, persona: str | None = None) -> Demonstrator:
        """Careful: the reference. Careless: on a two-hop question, answers with the
        entity the first search found (the bridge) instead of searching again."""
        return PersonaAnswerDemonstrator(self, rng, persona, _TEMPLATES)

    def demo_answer(self, persona: str, rng: random.Random) -> tuple[str, dict[str, str]]:
        question = self.question
        action = self.solve()[0]  # type: ignore[index]
        if persona == "careless" and question.bridge and self.searches:
            action = f"finish[{question.bridge}]"
        if self.searches and rng.random() < self.options.demo_noise:
            action = f"finish[{rng.choice(question.text.split()[:-1])}]"
        verb, argument = split_action(action)
        facts = {"topic": question.hops[0] if question.hops else "the question"}
        facts |= {"query": argument} if verb == "search" else {"answer": argument, "found": argument}
        return action, facts


def answer_matches(given: str, gold: str) -> bool:
    """Exact match, or token F1 >= 0.3, after normalising both (SQuAD-style)."""
    g, t = _normal(given), _normal(gold)
    if g == t:
        return True
    common = Counter(g) & Counter(t)
    overlap = sum(common.values())
    if not overlap:
        return False
    precision, recall = overlap / len(g), overlap / len(t)
    return 2 * precision * recall / (precision + recall) >= F1_THRESHOLD


def _normal(text: str) -> list[str]:
    text = re.sub(r"[^\w\s]", " ", text.lower())
    return [w for w in text.split() if w not in ("a", "an", "the")]


def _answers(answer: str) -> list[str]:
    return answer.split(" ||| ")  # several gold answers are stored joined


class _Corpus:
    def __init__(self, documents: tuple[str, ...], questions: tuple[knowledge.Question, ...]):
        self.index, self.questions = BM25Index(list(documents)), questions


@functools.cache
def _corpus(kb_seed: int, people: int, corpus_path: str | None, questions_path: str | None) -> _Corpus:
    """Built once per process and setting (every episode shares it)."""
    if corpus_path and questions_path:
        return _Corpus(load_corpus(corpus_path), load_questions(questions_path))
    kb = knowledge.build(kb_seed, people)
    return _Corpus(kb.documents, kb.questions)


def load_corpus(path: str) -> tuple[str, ...]:
    """Documents from JSON lines: ``contents``, or ``title`` and ``text``."""
    docs = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path}:{number}: not a JSON line") from None
        text = record.get("contents") or " : ".join(
            str(record[k]) for k in ("title", "text") if record.get(k))
        if not text:
            raise ValueError(f"{path}:{number}: needs 'contents' or 'title'/'text'")
        docs.append(" ".join(str(text).split()))
    if not docs:
        raise ValueError(f"{path}: no documents")
    return tuple(docs)


def load_questions(path: str) -> tuple[knowledge.Question, ...]:
    """Questions from a JSON list or JSON lines with ``question`` and ``answer``,
    ``answers`` or ``golden_answers``."""
    records = read_records(path)
    questions = []
    for index, record in enumerate(records):
        gold = record.get("answers") or record.get("golden_answers") or record.get("answer")
        gold = [gold] if isinstance(gold, str) else [str(g) for g in gold or []]
        if not record.get("question") or not gold:
            raise ValueError(f"{path}: record {index} needs 'question' and 'answer'/'answers'")
        questions.append(knowledge.Question(" ".join(record["question"].split()),
                                            " ||| ".join(gold), (), None))
    return tuple(questions)

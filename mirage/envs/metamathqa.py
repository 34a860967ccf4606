"""MetaMathQA-style math: answer a word problem, with several attempts.

A correct answer at attempt k (0-based) earns 1/2^k and ends the episode; a wrong one
earns 0 and the next observation says "Incorrect. Please think again." until
``max_attempts`` answers were given (the turn protocol's ``max_turns`` also caps them).
Problems come from a seeded generator (``mirage/envs/wordproblems.py``) or, with
``data_path``, from a local file in the MetaMathQA format: a JSON list (or JSON lines)
of ``{"query": ..., "response": "... The answer is: 42"}``. Answers are compared as
numbers when both sides are numbers (``1,200`` = ``1200``, ``0.5`` = ``1/2``), else as
text with case and spaces ignored.
"""

from __future__ import annotations

import functools
import random
import re
from pathlib import Path

from pydantic import Field, field_validator

from mirage.core.rl.env import Demonstrator, StepOutcome
from mirage.envs import wordproblems
from mirage.envs.answer import (
    AnswerEnvironment,
    AnswerOptions,
    PersonaAnswerDemonstrator,
    parse_number,
    read_records,
)

FEEDBACK = "Incorrect. Please think again."

_TEMPLATES = [
    "{steps} .",
    "Let me compute : {steps} .",
    "The answer is {answer} .",
    "So the answer is {answer} .",
    "Read the question and count .",
    "{steps} , so {answer} .",
    "I think it is {answer} .",
    "Step by step : {steps} .",
]


class MetaMathQAOptions(AnswerOptions):
    """Attempts, the generator's settings, or a local MetaMathQA file."""

    max_attempts: int = Field(3, ge=1)
    max_operand: int = Field(9, ge=2, le=99)
    families: tuple[str, ...] = wordproblems.FAMILIES
    data_path: str | None = Field(None, description="MetaMathQA JSON / JSON-lines file to draw problems from")

    @field_validator("families")
    @classmethod
    def _known_families(cls, families: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [f for f in families if f not in wordproblems.FAMILIES]
        if unknown or not families:
            raise ValueError(f"unknown families {unknown}; valid: {', '.join(wordproblems.FAMILIES)}")
        return families

    @field_validator("data_path")
    @classmethod
    def _file_exists(cls, path: str | None) -> str | None:
        if path is not None and not Path(path).is_file():
            raise ValueError(f"no such file: {path}")
        return path


class MetaMathQA(AnswerEnvironment):
    """Multi-attempt math word problems; see the module docstring for the rules."""

    name = "metamathqa"
    version = "1"
    Options = MetaMathQAOptions
    instruction = "Math : solve the problem and answer with the number only ."

    options: MetaMathQAOptions

    def __init__(self, options: MetaMathQAOptions | None = None):
        super().__init__(options)
        self.load("What is 1 plus 1 ?", "2")

    def load(self, question: str, answer: str, problem: wordproblems.WordProblem | None = None) -> MetaMathQA:
        """Set a hand-made problem (tests); returns self."""
        self.question, self.answer, self.problem = question, answer, problem
        self.attempts: list[str] = []
        self.done = self._success = False
        return self

    def reset(self, seed: int) -> str:
        """The problem for ``seed``: generated, or drawn from ``data_path``."""
        rng = random.Random(f"metamathqa:{seed}")
        if self.options.data_path:
            problems = load_metamathqa(self.options.data_path)
            question, answer = problems[rng.randrange(len(problems))]
            self.load(question, answer)
        else:
            problem = wordproblems.generate(rng, self.options.max_operand, self.options.families)
            self.load(problem.question, str(problem.answer), problem)
        return self.render()

    def step(self, action: str) -> StepOutcome:
        """Check one answer."""
        self._check_open()
        attempt = len(self.attempts)
        self.attempts.append(action)
        if is_correct(action, self.answer):
            self.done = self._success = True
            return StepOutcome(reward=0.5 ** attempt, done=True, success=True)
        self.done = len(self.attempts) >= self.options.max_attempts
        return StepOutcome(reward=0.0, done=self.done, success=False)

    def render(self) -> str:
        lines = [f"Question : {self.question}"]
        if self.attempts and not self._success:
            lines += [f"Your answer : {self.attempts[-1]} .", FEEDBACK]
        return "\n".join(lines)

    def solve(self) -> list[str] | None:
        return [self.answer]

    def demonstrator(self, rng: random.Random, persona: str | None = None) -> Demonstrator:
        """Careful: the right answer. Careless: the family's structured mistake first,
        the right answer on a retry. ``demo_noise`` answers are off by one."""
        return PersonaAnswerDemonstrator(self, rng, persona, _TEMPLATES)

    def demo_answer(self, persona: str, rng: random.Random) -> tuple[str, dict[str, str]]:
        problem = self.problem
        if problem is None:  # a loaded problem: no known structured mistake
            return self.answer, {"answer": self.answer}
        careless = persona == "careless" and not self.attempts
        answer, steps = ((problem.careless_answer, problem.careless_steps) if careless
                         else (problem.answer, problem.steps))
        if rng.random() < self.options.demo_noise:
            answer = max(0, answer + rng.choice((-1, 1)))
        return str(answer), {"answer": str(answer), "steps": steps}


def is_correct(given: str, expected: str) -> bool:
    """Numeric equality when both parse as numbers, else normalised text equality."""
    given_number, expected_number = parse_number(given), parse_number(expected)
    if given_number is not None and expected_number is not None:
        return given_number == expected_number
    return _normal(given) == _normal(expected) != ""


def _normal(text: str) -> str:
    text = re.sub(r"\\boxed\{(.*)\}", r"\1", text)
    return re.sub(r"\s+", "", text).strip(".$").lower()


@functools.cache
def load_metamathqa(path: str) -> tuple[tuple[str, str], ...]:
    """(question, answer) pairs from a MetaMathQA file: a JSON list or JSON lines of
    objects with ``query`` and ``response`` (answer after "The answer is:"), or with
    ``question`` and ``answer``. ValueError naming the file on anything else."""
    records = read_records(path)
    pairs = []
    for index, record in enumerate(records):
        question = record.get("query", record.get("question")) if isinstance(record, dict) else None
        answer = _record_answer(record) if isinstance(record, dict) else None
        if not question or answer is None:
            raise ValueError(f"{path}: record {index} needs 'query' and a 'response' ending in "
                             "'The answer is: X' (or 'question' and 'answer')")
        pairs.append((" ".join(str(question).split()), answer))
    if not pairs:
        raise ValueError(f"{path}: no problems")
    return tuple(pairs)


def _record_answer(record: dict) -> str | None:
    if "answer" in record:
        return str(record["answer"]).strip()
    match = re.search(r"The answer is:?\s*(.+?)\s*$", str(record.get("response", "")), re.S)
    return match[1].strip() if match else None

"""An environment written on 4 December 2026: subtract the smaller number from the
larger, one turn; the careless demonstrator adds instead."""

from __future__ import annotations

import random

from pydantic import Field

from mirage.core.env import StepOutcome
from mirage.core.hookspecs import hookimpl
from mirage.envs.answer import AnswerEnvironment, AnswerOptions, PersonaAnswerDemonstrator, parse_number

__version__ = "0.1.0"


class DifferenceOptions(AnswerOptions):
    max_operand: int = Field(9, ge=1, le=50)


class Difference(AnswerEnvironment):
    name = "dec4_difference"
    version = "1"
    Options = DifferenceOptions
    instruction = "Subtract the smaller number from the larger and answer with the difference ."

    def __init__(self, options: DifferenceOptions | None = None):
        super().__init__(options)
        self.a, self.b = 1, 1

    def reset(self, seed: int) -> str:
        rng = random.Random(f"dec4_difference:{seed}")
        self.a, self.b = sorted((rng.randint(1, self.options.max_operand) for _ in range(2)), reverse=True)
        self.done = self._success = False
        return self.render()

    def step(self, action: str) -> StepOutcome:
        self._check_open()
        self.done, self._success = True, parse_number(action) == self.a - self.b
        return StepOutcome(reward=float(self._success), done=True, success=self._success)

    def render(self) -> str:
        return f"What is {self.a} minus {self.b} ?"

    def solve(self) -> list[str]:
        return [str(self.a - self.b)]

    def demonstrator(self, rng: random.Random, persona: str | None = None):
        templates = ["{a} minus {b} is {answer} .", "The difference is {answer} ."]
        return PersonaAnswerDemonstrator(self, rng, persona, templates)

    def demo_answer(self, persona: str, rng: random.Random) -> tuple[str, dict[str, str]]:
        answer = self.a - self.b if persona == "careful" else self.a + self.b
        return str(answer), {"a": str(self.a), "b": str(self.b), "answer": str(answer)}


@hookimpl
def mirage_register_envs(register):
    register("dec4_difference", Difference)

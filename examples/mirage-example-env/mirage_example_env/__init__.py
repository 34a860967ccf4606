"""An example environment shipped as its own package: add two small numbers.

Observation ``What is 3 plus 4 ?``; the answer is the number; reward 1 if right, else
0; one turn. The careless demonstrator multiplies instead of adding (a structured
mistake, see MIRAGE's docs/warm-start.md). Registered as ``example_sum`` through the
``mirage`` entry point in pyproject.toml.
"""

from __future__ import annotations

import random

from pydantic import Field

from mirage.plugin import (
    hookimpl,
    StepOutcome,
    AnswerEnvironment,
    AnswerOptions,
    PersonaAnswerDemonstrator,
    parse_number,
)

__version__ = "0.1.0"
MIRAGE_PLUGIN_API = ">=2.1,<3"  # the plugin API it is written for (docs/plugin-api.md)


class SumOptions(AnswerOptions):
    max_operand: int = Field(9, ge=1, le=50)


class Sum(AnswerEnvironment):
    name = "example_sum"
    version = "1"
    Options = SumOptions
    instruction = "Add the two numbers and answer with the sum ."

    def __init__(self, options: SumOptions | None = None):
        super().__init__(options)
        self.a, self.b = 1, 1

    def reset(self, seed: int) -> str:
        rng = random.Random(f"example_sum:{seed}")  # str seeds are stable across processes
        self.a, self.b = (rng.randint(1, self.options.max_operand) for _ in range(2))
        self.done = self._success = False
        return self.render()

    def step(self, action: str) -> StepOutcome:
        self._check_open()
        self.done, self._success = True, parse_number(action) == self.a + self.b
        return StepOutcome(reward=float(self._success), done=True, success=self._success)

    def render(self) -> str:
        return f"What is {self.a} plus {self.b} ?"

    def solve(self) -> list[str]:
        return [str(self.a + self.b)]

    def demonstrator(self, rng: random.Random, persona: str | None = None):
        templates = ["{a} plus {b} is {answer} .", "The sum is {answer} .", "Add them up ."]
        return PersonaAnswerDemonstrator(self, rng, persona, templates)

    def demo_answer(self, persona: str, rng: random.Random) -> tuple[str, dict[str, str]]:
        answer = self.a + self.b if persona == "careful" else self.a * self.b
        return str(answer), {"a": str(self.a), "b": str(self.b), "answer": str(answer)}


@hookimpl
def mirage_register_envs(register):
    register("example_sum", Sum)

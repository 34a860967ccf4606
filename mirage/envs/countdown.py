"""Countdown: combine the given numbers with + - * / into the target (single turn).

Instances are generated solvable: ``num_numbers`` integers in 1..``max_number`` are
combined by random operations (subtraction only to a positive result, division only when
exact) into a target in 1..``max_target``. The answer is one expression using every
number exactly once (TinyZero's rule). Reward 1 if it equals the target, 0.1 if it uses
exactly the given numbers but the value is wrong (or divides by zero), 0 otherwise
(other numbers, or not an expression). The episode ends after one answer.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

from pydantic import Field

from mirage.core.rl.env import Demonstrator, StepOutcome
from mirage.envs import arithmetic
from mirage.envs.answer import AnswerEnvironment, AnswerOptions, PersonaAnswerDemonstrator

PARTIAL_REWARD = 0.1

_TEMPLATES = [
    "I need {target} from {numbers} .",
    "Try {expr} .",
    "{expr} makes {value} .",
    "Combine the numbers in order .",
    "The target is {target} ; {hint} .",
    "Use every number once .",
    "{target} is {size} , so {hint} .",
    "Let me check : {expr} is {value} .",
    "Numbers {numbers} , target {target} .",
]


class CountdownOptions(AnswerOptions):
    """How many numbers, their range and the target's range."""

    num_numbers: int = Field(3, ge=2, le=5)
    max_number: int = Field(9, ge=1, le=100)
    max_target: int = Field(60, ge=1, le=1000)


class Countdown(AnswerEnvironment):
    """The Countdown number game; see the module docstring for the rules."""

    name = "countdown"
    version = "1"
    Options = CountdownOptions
    instruction = (
        "Countdown : write one arithmetic expression with + - * / and parentheses that uses "
        "every given number exactly once and equals the target ."
    )

    options: CountdownOptions

    def __init__(self, options: CountdownOptions | None = None):
        super().__init__(options)
        self.load([1, 1], 2)

    def load(self, numbers: list[int], target: int) -> Countdown:
        """Set a hand-made instance (tests); returns self."""
        self.numbers, self.target = list(numbers), target
        self.done = self._success = False
        self.last_answer: str | None = None
        return self

    def reset(self, seed: int) -> str:
        """Generate the instance for ``seed`` (a fixed function of the seed and options)."""
        rng, opts = random.Random(f"countdown:{seed}"), self.options
        while True:
            numbers = [rng.randint(1, opts.max_number) for _ in range(opts.num_numbers)]
            target = _random_value(rng, numbers)
            if target.denominator == 1 and 1 <= target <= opts.max_target:
                self.load(numbers, int(target))
                return self.render()

    def step(self, action: str) -> StepOutcome:
        """Score one expression; ends the episode."""
        self._check_open()
        self.last_answer = action
        reward = self.score(action)
        self.done, self._success = True, reward == 1.0
        return StepOutcome(reward=reward, done=True, success=self._success)

    def score(self, expression: str) -> float:
        """1, 0.1 or 0 for ``expression`` on this instance (module docstring)."""
        try:
            evaluated = arithmetic.evaluate(expression)
        except arithmetic.ExpressionError:
            return 0.0
        if sorted(evaluated.numbers) != sorted(self.numbers):
            return 0.0
        return 1.0 if evaluated.value == self.target else PARTIAL_REWARD

    def render(self) -> str:
        return f"Numbers : {' '.join(map(str, self.numbers))} . Target : {self.target} ."

    def solve(self) -> list[str] | None:
        """An expression reaching the target (exhaustive search), or None."""
        found = arithmetic.solve(self.numbers, self.target)
        return [found] if found else None

    def careless_answer(self) -> str:
        """The careless persona's answer: the numbers in the given order with only + and *,
        read left to right, whichever such expression comes closest to the target."""
        best = min(
            (arithmetic.left_to_right(self.numbers, list(ops))
             for ops in itertools.product("+*", repeat=len(self.numbers) - 1)),
            key=lambda text_value: abs(text_value[1] - self.target),
        )
        return best[0]

    def demonstrator(self, rng: random.Random, persona: str | None = None) -> Demonstrator:
        """Careful (solver) or careless (``careless_answer``) persona; ``demo_noise`` random answers."""
        return PersonaAnswerDemonstrator(self, rng, persona, _TEMPLATES)

    def demo_answer(self, persona: str, rng: random.Random) -> tuple[str, dict[str, str]]:
        if rng.random() < self.options.demo_noise:
            shuffled = rng.sample(self.numbers, len(self.numbers))
            expr = arithmetic.left_to_right(shuffled, [rng.choice("+-*") for _ in shuffled[1:]])[0]
        elif persona == "careful":
            expr = (self.solve() or [self.careless_answer()])[0]
        else:
            expr = self.careless_answer()
        value = arithmetic.evaluate(expr).value
        large = self.target > max(self.numbers) * 2
        facts = dict(target=str(self.target), numbers=" , ".join(map(str, self.numbers)), expr=expr,
                     size="large" if large else "small",
                     hint="multiply" if large else "add or subtract")
        if value is not None:
            facts["value"] = _say(value)
        return expr, facts


def _random_value(rng: random.Random, numbers: list[int]) -> Fraction:
    """Combine all ``numbers`` pairwise at random (+, *, - to a positive value, exact /)."""
    items = [Fraction(n) for n in numbers]
    while len(items) > 1:
        a, b = (items.pop(rng.randrange(len(items))) for _ in range(2))
        choices = [a + b, a * b]
        if a != b:
            choices.append(abs(a - b))
        if b and a % b == 0:
            choices.append(a / b)
        items.append(rng.choice(choices))
    return items[0]


def _say(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator} / {value.denominator}"

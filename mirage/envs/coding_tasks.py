"""Small seeded programming tasks for DeepCoder: a description, a reference solution,
a careless solution (a structured mistake) and unit-test inputs with expected outputs.

Every solution is one line, ``def solve(xs): return ...``, so it survives the tiny
policy's tokenizer (which drops newlines and indentation); the expected outputs are
computed here by trusted Python, never by the sandboxed code.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Family:
    describe: str  # with {k}
    reference: str
    careless: str
    compute: Callable[[list[int], int], Any]


FAMILIES: dict[str, Family] = {
    "sum_above": Family("return the sum of the numbers in xs that are greater than {k}",
                        "def solve(xs): return sum(x for x in xs if x > {k})",
                        "def solve(xs): return sum(x for x in xs if x >= {k})",
                        lambda xs, k: sum(x for x in xs if x > k)),
    "count_multiples": Family("return how many numbers in xs are divisible by {k}",
                              "def solve(xs): return len([x for x in xs if x % {k} == 0])",
                              "def solve(xs): return len([x for x in xs if x % {k} != 0])",
                              lambda xs, k: len([x for x in xs if x % k == 0])),
    "scale": Family("return the list xs with every number multiplied by {k}",
                    "def solve(xs): return [x * {k} for x in xs]",
                    "def solve(xs): return [x + {k} for x in xs]",
                    lambda xs, k: [x * k for x in xs]),
    "max_plus": Family("return the largest number in xs plus {k}",
                       "def solve(xs): return max(xs) + {k}",
                       "def solve(xs): return max(xs)",
                       lambda xs, k: max(xs) + k),
    "last_reversed": Family("return the last {k} numbers of xs in reverse order",
                            "def solve(xs): return xs[::-1][:{k}]",
                            "def solve(xs): return xs[:{k}]",
                            lambda xs, k: xs[::-1][:k]),
    "evens_below": Family("return the even numbers in xs that are smaller than {k} , in order",
                          "def solve(xs): return [x for x in xs if x % 2 == 0 and x < {k}]",
                          "def solve(xs): return [x for x in xs if x % 2 == 0]",
                          lambda xs, k: [x for x in xs if x % 2 == 0 and x < k]),
}


@dataclass(frozen=True)
class CodingTask:
    family: str
    description: str
    reference: str
    careless: str
    inputs: tuple[tuple[list[int], ...], ...]  # positional arguments per test
    expected: tuple[Any, ...]


def generate(rng: random.Random, tests: int) -> CodingTask:
    """A task from a family drawn with ``rng``, with ``tests`` test cases."""
    name = rng.choice(sorted(FAMILIES))
    family, k = FAMILIES[name], rng.randint(2, 9)
    inputs = tuple(([rng.randint(0, 20) for _ in range(rng.randint(1, 8))],) for _ in range(tests))
    return CodingTask(name, family.describe.format(k=k), family.reference.format(k=k),
                      family.careless.format(k=k), inputs,
                      tuple(family.compute(list(args[0]), k) for args in inputs))

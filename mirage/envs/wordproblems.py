"""A seeded generator of arithmetic word problems with exact integer answers.

Each family writes a problem from a name, an item and small operands, and knows two
answers: the right one and the *careless* one (a structured mistake: the wrong
operation, or a forgotten last step) that the careless demonstrator gives first.
Operands lie in 2..``max_operand``, so every answer stays in a small range that the
warm-start demonstrations cover (the tiny policy writes each number as one word).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

NAMES = ("Ana", "Ben", "Cara", "Dev", "Emma", "Finn", "Gina", "Hugo", "Ivy", "Jon", "Kim", "Leo")
ITEMS = ("apples", "books", "coins", "pens", "stamps", "shells", "cards", "marbles", "cookies", "stickers")
FAMILIES = ("add", "subtract", "multiply", "share", "packs_eaten", "rows_added")


@dataclass(frozen=True)
class WordProblem:
    """A problem, its answer, and what the careless persona answers first."""

    family: str
    question: str
    answer: int
    careless_answer: int
    steps: str  # the right computation, spaced, e.g. "3 times 4 is 12"
    careless_steps: str


def generate(rng: random.Random, max_operand: int, families: tuple[str, ...] = FAMILIES) -> WordProblem:
    """One problem from a family drawn with ``rng``."""
    family = rng.choice(families)
    name, other = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    a, b, c = (rng.randint(2, max_operand) for _ in range(3))
    return _FAMILY[family](family, name, other, item, a, b, c)


def _add(family, name, other, item, a, b, c) -> WordProblem:
    q = f"{name} has {a} {item} and gets {b} more from {other} . How many {item} does {name} have now ?"
    return WordProblem(family, q, a + b, a + b, f"{a} plus {b} is {a + b}", f"{a} plus {b} is {a + b}")


def _subtract(family, name, other, item, a, b, c) -> WordProblem:
    total = a + b
    q = f"{name} had {total} {item} and gave {b} to {other} . How many {item} does {name} have left ?"
    return WordProblem(family, q, a, total + b, f"{total} minus {b} is {a}", f"{total} plus {b} is {total + b}")


def _multiply(family, name, other, item, a, b, c) -> WordProblem:
    q = f"{name} has {a} boxes with {b} {item} in each box . How many {item} are there in all ?"
    return WordProblem(family, q, a * b, a + b, f"{a} times {b} is {a * b}", f"{a} plus {b} is {a + b}")


def _share(family, name, other, item, a, b, c) -> WordProblem:
    total = a * b
    q = f"{name} shares {total} {item} equally among {b} friends . How many {item} does each friend get ?"
    return WordProblem(family, q, a, total - b, f"{total} divided by {b} is {a}", f"{total} minus {b} is {total - b}")


def _packs_eaten(family, name, other, item, a, b, c) -> WordProblem:
    c = min(c, a * b - 1)
    q = (f"{name} buys {a} packs of {b} {item} and gives {c} of them to {other} . "
         f"How many {item} does {name} keep ?")
    return WordProblem(family, q, a * b - c, a * b, f"{a} times {b} is {a * b} , minus {c} is {a * b - c}",
                       f"{a} times {b} is {a * b}")


def _rows_added(family, name, other, item, a, b, c) -> WordProblem:
    q = (f"{name} puts {item} in {a} rows of {b} , then adds {c} more . "
         f"How many {item} are there now ?")
    return WordProblem(family, q, a * b + c, a * b, f"{a} times {b} is {a * b} , plus {c} is {a * b + c}",
                       f"{a} times {b} is {a * b}")


_FAMILY = {"add": _add, "subtract": _subtract, "multiply": _multiply, "share": _share,
           "packs_eaten": _packs_eaten, "rows_added": _rows_added}

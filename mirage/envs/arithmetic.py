"""Exact arithmetic expressions for Countdown: a parser (no ``eval``), and a solver.

Grammar: ``expr = term (("+" | "-") term)*``, ``term = factor (("*" | "/") factor)*``,
``factor = integer | "(" expr ")"``. Whitespace anywhere is ignored, except between
the digits of one number (``1 2`` is two numbers). Values are exact fractions.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from fractions import Fraction

_TOKEN = re.compile(r"\s*(?:(\d+)|([-+*/()]))")


class ExpressionError(ValueError):
    """The text is not an expression of the grammar above."""


@dataclass(frozen=True)
class Evaluated:
    """An expression's value (None on division by zero) and the integers it uses."""

    value: Fraction | None
    numbers: tuple[int, ...]


def evaluate(text: str) -> Evaluated:
    """Parse and evaluate ``text``; ExpressionError if it does not parse."""
    tokens = _tokenize(text)
    parser = _Parser(tokens)
    value = parser.expr()
    if parser.position != len(tokens):
        raise ExpressionError(f"unexpected {tokens[parser.position]!r}")
    return Evaluated(value, tuple(parser.numbers))


def _tokenize(text: str) -> list[str]:
    tokens, position, text = [], 0, text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match:
            raise ExpressionError(f"unexpected character {text[position:].strip()[:1]!r}")
        tokens.append(match[1] or match[2])
        position = match.end()
    if not tokens:
        raise ExpressionError("empty expression")
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]):
        self.tokens, self.position, self.numbers = tokens, 0, []

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise ExpressionError("expression ends too early")
        self.position += 1
        return token

    def expr(self) -> Fraction | None:
        value = self.term()
        while self._peek() in ("+", "-"):
            op, right = self._take(), self.term()
            value = _apply(op, value, right)
        return value

    def term(self) -> Fraction | None:
        value = self.factor()
        while self._peek() in ("*", "/"):
            op, right = self._take(), self.factor()
            value = _apply(op, value, right)
        return value

    def factor(self) -> Fraction | None:
        token = self._take()
        if token == "(":
            value = self.expr()
            if self._take() != ")":
                raise ExpressionError("missing ')'")
            return value
        if token.isdigit():
            self.numbers.append(int(token))
            return Fraction(int(token))
        raise ExpressionError(f"unexpected {token!r}")


def _apply(op: str, left: Fraction | None, right: Fraction | None) -> Fraction | None:
    if left is None or right is None:
        return None
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    return None if right == 0 else left / right


# ---------------------------------------------------------------------- solver
_Item = tuple[Fraction, str, int]  # value, text, precedence (2 atom/parenthesised, 1 * /, 0 + -)


def solve(numbers: list[int], target: int) -> str | None:
    """An expression using every number exactly once that equals ``target``, or None.

    Exhaustive search over pairwise combinations (the 24-game search); the first
    solution in a fixed order is returned, so the answer is deterministic. Texts are
    spaced tokens, e.g. ``( 3 + 5 ) * 2``.
    """
    items = [(Fraction(n), str(n), 2) for n in numbers]
    return _search(items, Fraction(target))


def _search(items: list[_Item], target: Fraction) -> str | None:
    if len(items) == 1:
        return items[0][1] if items[0][0] == target else None
    for i, j in itertools.permutations(range(len(items)), 2):
        rest = [item for k, item in enumerate(items) if k not in (i, j)]
        for combined in _combine(items[i], items[j]):
            found = _search(rest + [combined], target)
            if found:
                return found
    return None


def _combine(a: _Item, b: _Item) -> list[_Item]:
    (va, ta, pa), (vb, tb, pb) = a, b
    out = [(va + vb, f"{ta} + {tb}", 0), (va * vb, f"{_wrap(ta, pa, 1)} * {_wrap(tb, pb, 2)}", 1)]
    if va > vb:
        out.append((va - vb, f"{ta} - {_wrap(tb, pb, 1)}", 0))
    if vb != 0 and va % vb == 0:
        out.append((va / vb, f"{_wrap(ta, pa, 1)} / {_wrap(tb, pb, 2)}", 1))
    return out


def _wrap(text: str, precedence: int, needed: int) -> str:
    return text if precedence >= needed else f"( {text} )"


def left_to_right(numbers: list[int], ops: list[str]) -> tuple[str, Fraction]:
    """``n0 op0 n1 op1 n2 ...`` read strictly left to right (the careless persona's
    shape: no reordering, parentheses where the reading needs them); text and value."""
    text, value, precedence = str(numbers[0]), Fraction(numbers[0]), 2
    for op, n in zip(ops, numbers[1:]):
        needed = 1 if op in "*/" else 0
        text = f"{_wrap(text, precedence, needed)} {op} {n}"
        value = _apply(op, value, Fraction(n)) or Fraction(0)
        precedence = needed
    return text, value

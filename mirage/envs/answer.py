"""Helpers for environments whose action is free text (an expression, a number, code,
``search[...]``) rather than a fixed action name.

The tiny default policy's word-level tokenizer splits on whitespace and isolates every
punctuation character, and decodes by joining tokens with single spaces: ``(3+4)*2``
comes back as ``( 3 + 4 ) * 2`` and ``x == 1`` as ``x = = 1``. A word never seen in the
demonstrations becomes ``[UNK]`` and is dropped on decoding. So the environments here
(1) write observations and demonstrations with tokens already separated by spaces,
(2) keep every number the policy must write inside a bounded range that the warm-start
demonstrations cover, and (3) parse answers whitespace-insensitively.
"""

from __future__ import annotations

import json
import random
import re
from fractions import Fraction
from pathlib import Path

from pydantic import Field

from mirage.core.rl.env import DemoTurn, Environment
from mirage.envs.phrasing import PersonaOptions, choose_persona, phrase


def read_records(path: str) -> list:
    """The records of a user's data file: a JSON list, or JSON lines. ValueError naming
    the file when it is neither."""
    text = Path(path).read_text()
    try:
        if text.lstrip().startswith("["):
            return json.loads(text)
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON or JSON lines ({error})") from None


class AnswerOptions(PersonaOptions):
    """Options every free-text environment shares: the demonstrators' ``careful_share``
    (the careful persona gives the reference answer, the careless one makes the
    environment's structured mistake, docs/warm-start.md) and ``demo_noise`` (share of
    demonstrated answers replaced by a random one)."""

    demo_noise: float = Field(
        0.1, ge=0, le=1, description="share of demonstrated answers replaced by a random one"
    )


class AnswerEnvironment(Environment):
    """An environment whose whole ``<answer>`` body is one action (not split on ``||``).

    Subclasses keep ``self.done`` and ``self._success`` up to date.
    """

    done: bool = False
    _success: bool = False

    def parse_actions(self, answer: str) -> list[str] | None:
        """The answer with whitespace collapsed, as a single action; None if empty."""
        text = " ".join(answer.split())
        return [text] if text else None

    @property
    def success(self) -> bool:
        return self._success

    def _check_open(self) -> None:
        if self.done:
            raise ValueError("the episode is over; call reset() before stepping again")


class BracketActions:
    """Mixin: actions of the form ``verb[argument]`` separated by ``||`` (SearchQA, WebShop)."""

    verbs: tuple[str, ...] = ()

    def parse_actions(self, answer: str) -> list[str] | None:
        """Each ``||``-separated part must be ``verb[text]`` with a known verb; the
        result is normalised to ``verb[text]`` with single spaces inside."""
        parts = [p.strip() for p in answer.split("||")]
        actions = []
        for part in parts:
            match = re.fullmatch(r"(\w+)\s*\[(.*)\]", part, re.S)
            if not match or match[1].lower() not in self.verbs or not match[2].strip():
                return None
            actions.append(f"{match[1].lower()}[{' '.join(match[2].split())}]")
        return actions or None


def split_action(action: str) -> tuple[str, str]:
    """``"search[tall towers]"`` -> ``("search", "tall towers")``."""
    verb, _, rest = action.partition("[")
    return verb, rest[:-1] if rest.endswith("]") else rest


def spaced(text: str) -> str:
    """Text with every punctuation character separated by spaces, as the tiny policy
    writes it: ``"(3+4)*2"`` -> ``"( 3 + 4 ) * 2"``."""
    return " ".join(re.sub(r"([^\w\s])", r" \1 ", text).split())


def parse_number(text: str) -> Fraction | None:
    """A number written as ``12``, ``-3``, ``1 2`` (digits spaced by a tokenizer),
    ``1,200``, ``2.5``, ``3/4`` or ``\\boxed{7}``; None if ``text`` is not one."""
    body = re.sub(r"\\boxed\{(.*)\}", r"\1", text).replace("$", "")
    body = re.sub(r"\s+", "", body).replace(",", "").rstrip(".")
    if not re.fullmatch(r"-?\d+(\.\d+)?(/\d+)?", body):
        return None
    try:
        return Fraction(body)
    except (ValueError, ZeroDivisionError):
        return None


class PersonaAnswerDemonstrator:
    """One episode's demonstrator for a free-text environment.

    Each call asks the environment for the persona's answer and the facts that may fill
    a reasoning template: ``env.demo_answer(persona, rng) -> (answer, facts)``.
    """

    def __init__(self, env, rng: random.Random, persona: str | None, templates: list[str]):
        self.env, self.rng, self.templates = env, rng, templates
        self.persona = choose_persona(rng, persona, env.options.careful_share)

    def __call__(self) -> DemoTurn:
        answer, facts = self.env.demo_answer(self.persona, self.rng)
        return DemoTurn(phrase(self.rng, self.templates, **facts), [answer])

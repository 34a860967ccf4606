"""The environment contract: one text episode, stepped one primitive action at a time.

The run loop owns turns, answer parsing and the format penalty (``core/rl/episode.py``);
an environment only knows its own rules. A registered environment is a class:
``EnvCls(options)`` builds an instance, ``reset(seed)`` starts a new episode.
"""

from __future__ import annotations

import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict

from mirage.core.rl.image import Image


class EnvOptions(BaseModel):
    """Base for an environment's own typed options (its defaults live there)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class StepOutcome:
    """What one primitive action did."""

    reward: float
    """The action's reward; a turn's reward is the sum over its applied actions."""
    done: bool
    """True ends the episode: no more actions are applied this turn or later."""
    success: bool
    """Whether the episode is solved (the trajectory's ``success`` when it ends)."""


@dataclass(frozen=True)
class DemoTurn:
    """One demonstrated turn: the reasoning text Z and the actions taken."""

    reasoning: str
    actions: list[str]


# A demonstrator looks at its environment's current state and proposes one turn.
Demonstrator = Callable[[], DemoTurn]


class Environment(ABC):
    """One episode of a text environment.

    Subclasses set ``name``, ``version``, ``Options`` (an ``EnvOptions`` subclass),
    ``action_names`` and ``instruction``, and implement the abstract methods.
    Everything must be deterministic given the options and the ``reset`` seed.
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    Options: ClassVar[type[EnvOptions]] = EnvOptions
    action_names: ClassVar[tuple[str, ...]] = ()
    instruction: ClassVar[str] = ""

    def __init__(self, options: EnvOptions | None = None):
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def reset(self, seed: int) -> str:
        """Start a new episode from ``seed``; return the first observation text."""

    @abstractmethod
    def step(self, action: str) -> StepOutcome:
        """Apply one valid action (an element of ``action_names``)."""

    @abstractmethod
    def render(self) -> str:
        """The observation text of the current state; in image mode it holds
        ``IMAGE_MARK`` (mirage/core/rl/image.py) where ``render_image()``'s picture goes."""

    def render_image(self) -> Image | None:
        """The picture of the current state when the environment shows one (its
        ``observation: image`` option), else None. Default: None (a text environment)."""
        return None

    @abstractmethod
    def solve(self) -> list[str] | None:
        """A shortest action sequence that succeeds from the current state, or None."""

    @abstractmethod
    def demonstrator(self, rng: random.Random) -> Demonstrator:
        """A policy for warm-start demonstrations of the episode just reset.

        Called once per episode after ``reset``; the returned callable is called once
        per turn and reads the environment's current state.
        """

    @property
    @abstractmethod
    def success(self) -> bool:
        """Whether the episode has been won."""

    @classmethod
    def options_problem(cls, options: EnvOptions) -> str | None:
        """Why a run with ``options`` cannot start on this machine (one line naming what is
        missing and how to fix it), or None. Called at validation, before anything is
        written; a problem stops the run with exit status 2. Default: none."""
        return None

    @classmethod
    def run_facts(cls, options: EnvOptions) -> dict[str, Any]:
        """Facts about how this machine runs the environment (e.g. the sandbox's isolation
        level), recorded in the run's ``environment`` event. Default: none."""
        return {}

    @classmethod
    def unsafe_warning(cls, options: EnvOptions) -> str | None:
        """A warning the user must not miss (an explicitly unsafe option): recorded as an
        ``unsafe`` event and shown on every progress line. Default: none."""
        return None

    def seed_transitions(self, seed: int) -> None:
        """Reseed random transitions (e.g. slipping) apart from the instance.

        Called after ``reset`` with a per-sample seed, so the G samples of one prompt
        share the instance but not their transition noise. Default: nothing random.
        """

    def parse_actions(self, answer: str) -> list[str] | None:
        """Split an ``<answer>`` body into valid actions, or None if any is invalid.

        Actions are separated by ``||`` and matched case-insensitively against
        ``action_names``. An empty answer is invalid.
        """
        parts = [p.strip() for p in answer.split("||")]
        if not parts or any(not p for p in parts):
            return None
        by_lower = {a.lower(): a for a in self.action_names}
        actions = [by_lower.get(p.lower()) for p in parts]
        if any(a is None for a in actions):
            return None
        return actions  # type: ignore[return-value]


_ANSWER = re.compile(r"^(?P<reasoning>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>", re.S)


@dataclass(frozen=True)
class ParsedResponse:
    """A response split into reasoning Z and answer text; ``ok`` is format validity."""

    reasoning: str
    answer: str
    ok: bool


def parse_response(response: str) -> ParsedResponse:
    """Split text generated after ``<think>`` into reasoning and answer.

    The expected form is ``Z </think> <answer> A </answer>``; anything else is a format
    error (reasoning is then the text up to ``</think>`` if present, else all of it).
    """
    match = _ANSWER.match(response)
    if match:
        return ParsedResponse(match["reasoning"].strip(), match["answer"].strip(), True)
    reasoning = response.split("</think>", 1)[0].strip()
    return ParsedResponse(reasoning, "", False)

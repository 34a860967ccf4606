"""Helpers shared by the grid environments: moves, BFS, demonstrator personas and noise,
and varied reasoning text.

Reasoning text is space-tokenised: words, numbers and punctuation are separated by
single spaces, so a word-level tokenizer reads it without surprises.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from string import Formatter
from typing import Literal, TypeVar

from pydantic import Field

from mirage.core.rl.env import DemoTurn, EnvOptions

State = TypeVar("State", bound=Hashable)
PERSONAS = ("careful", "careless")

MOVES: dict[str, tuple[int, int]] = {
    "Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)
}
ACTIONS: tuple[str, ...] = tuple(MOVES)
PERPENDICULAR: dict[str, tuple[str, str]] = {
    "Up": ("Left", "Right"),
    "Down": ("Left", "Right"),
    "Left": ("Up", "Down"),
    "Right": ("Up", "Down"),
}


class PersonaOptions(EnvOptions):
    """Demonstration settings shared by the persona environments (docs/warm-start.md)."""

    # A careless majority makes the greedy warm-started policy repeat the careless
    # persona's structured mistakes, which RL then has room to fix.
    careful_share: float = Field(0.3, ge=0, le=1, description="share of careful demonstrated episodes")
    # Uniform noise only teaches sampling noise that RL then removes (MEASURED.md); the
    # personas' structured mistakes are the headroom, so the grid worlds default to none.
    demo_noise: float = Field(
        0.0, ge=0, le=1, description="share of demonstrated actions replaced by a uniformly random one"
    )


class GridOptions(PersonaOptions):
    """Demonstration settings of the grid worlds, whose reasoning describes the state."""

    # Most reasoning names facts of this state, so it identifies its input (retrieval
    # ceiling >= 0.85 at P = 16, bench/mi_ceiling.py); a few generic sentences stay
    # available as the input-agnostic attractor a collapsing policy can fall into.
    generic_share: float = Field(
        0.08, ge=0, le=1, description="share of demonstrated turns whose reasoning is a generic, "
        "input-agnostic sentence instead of a description of the state"
    )
    # A handful of fixed sentences is a weak attractor (each about 1% of the turns). The
    # grammar makes generic reasoning a large, high-entropy set (thousands of sentences,
    # about 1 nat a word against about 0.1 for the state templates), so an entropy bonus
    # held near the warm start by a KL anchor can find valid, input-agnostic reasoning
    # (issue #32, docs/reproduction.md).
    generic_style: Literal["sentences", "grammar"] = Field(
        "sentences", description="what a generic turn says: one of the environment's few fixed "
        "sentences, or a sentence drawn from its combinatorial generic grammar"
    )
    # Issue #42: in image mode the picture is the only source of the state, so the
    # reasoning has to read it (the paper's visual rows, VAGEN's rendering).
    observation: Literal["text", "image"] = Field(
        "text", description="what each turn shows of the state: the text map with its coordinates "
        "and neighbours, or a picture of 16-pixel tiles (the prompt's text then carries only the "
        "instructions and the answer format)"
    )


def check_action(action: str) -> tuple[int, int]:
    """The (row, col) delta of ``action``; ValueError naming the valid actions otherwise."""
    if action not in MOVES:
        raise ValueError(f"invalid action {action!r}; valid actions are {', '.join(ACTIONS)}")
    return MOVES[action]


def bfs_path(start: State, successors: Callable[[State], Iterable[tuple[str, State]]],
             is_goal: Callable[[State], bool]) -> list[str] | None:
    """Shortest action list from ``start`` to a goal state, or None if none is reachable."""
    parent: dict[State, tuple[State, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if is_goal(state):
            path = []
            while (link := parent[state]) is not None:
                state, action = link
                path.append(action)
            return path[::-1]
        for action, nxt in successors(state):
            if nxt not in parent:
                parent[nxt] = (state, action)
                queue.append(nxt)
    return None


def choose_persona(rng: random.Random, forced: str | None, careful_share: float = 0.5) -> str:
    """Draw the episode's persona ('careful' with ``careful_share``) unless ``forced``.

    The draw is made even when forced, so forcing does not shift the rest of ``rng``.
    """
    drawn = PERSONAS[0] if rng.random() < careful_share else PERSONAS[1]
    if forced not in (None, *PERSONAS):
        raise ValueError(f"persona must be one of {PERSONAS} or None, not {forced!r}")
    return forced or drawn


def demo_success_rates(env_cls: type, options: object = None, episodes: int = 400,
                       turns: int = 5) -> dict[str, float]:
    """Success rate of each demonstrator persona over seeds 0..episodes-1 (a diagnostic).

    Each episode plays ``turns`` demonstrated turns, as the run loop would.
    """
    wins: dict[str, list[bool]] = {p: [] for p in PERSONAS}
    for seed in range(episodes):
        env = env_cls(options)
        env.reset(seed)
        demo = env.demonstrator(random.Random(seed))
        for _ in range(turns):
            if env.done:
                break
            for action in demo().actions:
                if not env.done:
                    env.step(action)
        wins[demo.persona].append(env.success)
    return {p: sum(w) / max(len(w), 1) for p, w in wins.items()}


def relative(dr: int, dc: int) -> str:
    """Where a cell lies relative to the viewer: 'below and to the left', 'here', ..."""
    vertical = "above" if dr < 0 else "below" if dr > 0 else ""
    horizontal = "to the left" if dc < 0 else "to the right" if dc > 0 else ""
    if vertical and horizontal:
        return f"{vertical} and {horizontal}"
    return vertical or horizontal or "here"


def heading(dr: int, dc: int) -> str:
    """The way to go to cover a displacement: 'down and left', 'up', 'nowhere'."""
    vertical = "up" if dr < 0 else "down" if dr > 0 else ""
    horizontal = "left" if dc < 0 else "right" if dc > 0 else ""
    return " and ".join(w for w in (vertical, horizontal) if w) or "nowhere"


def neighbour_line(describe: Callable[[str], str]) -> str:
    """What lies one step away in each direction: 'Up : wall , Down : floor , ... .'"""
    return " , ".join(f"{a} : {describe(a)}" for a in ACTIONS) + " ."


def add_noise(rng: random.Random, actions: list[str], rate: float) -> list[str]:
    """Replace each action, with probability ``rate``, by a uniformly random one."""
    return [rng.choice(ACTIONS) if rng.random() < rate else a for a in actions]


def turn_length(rng: random.Random, plan_length: int, single_rate: float = 0.1) -> int:
    """How many planned actions to take this turn: mostly 2, sometimes 1, never more."""
    if plan_length >= 2 and rng.random() >= single_rate:
        return 2
    return 1


def phrase(rng: random.Random, templates: list[str], **facts: str) -> str:
    """Fill a random template among those whose fields all appear in ``facts``.

    Templates without fields are always eligible, so there is always a choice.
    """
    usable = [t for t in templates if _fields(t) <= facts.keys()]
    text = rng.choice(usable).format(**facts)
    return " ".join(text.split())


# The slots every grid world's generic grammar shares (generic_grammar).
OPENERS = ["I", "I will", "I should", "Let me", "Now I", "Next I", "I must", "Time to"]
MANNERS = ["carefully", "slowly", "safely", "calmly", "steadily", "with care", "without hurry", "bit by bit"]
CONNECTORS = [";", "so", "and", "but", "; therefore"]


def generic_grammar(verbs: list[str], places: list[str], warnings: list[str],
                    resolutions: list[str]) -> list[list[list[str]]]:
    """A grid world's grammar of input-agnostic sentences (for :func:`compose`): "<opener>
    <verb> <manner> <place> ." and "<warning> <connector> <resolution> ."; none of the
    words may name a move."""
    return [[OPENERS, verbs, MANNERS, places, ["."]], [warnings, CONNECTORS, resolutions, ["."]]]


def compose(rng: random.Random, grammar: list[list[list[str]]]) -> str:
    """A sentence from ``grammar``: a random pattern (a list of slots), one random
    alternative per slot, joined by spaces."""
    pattern = rng.choice(grammar)
    return " ".join(" ".join(rng.choice(slot) for slot in pattern).split())


def grammar_size(grammar: list[list[list[str]]]) -> int:
    """How many sentences ``grammar`` can say (patterns are assumed not to overlap)."""
    total = 0
    for pattern in grammar:
        count = 1
        for slot in pattern:
            count *= len(slot)
        total += count
    return total


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in Formatter().parse(template) if name}


class PersonaDemonstrator:
    """One episode's demonstrator: the persona's plan (``env.solve()`` when careful,
    ``env.greedy_plan()`` when careless) cut to one turn, with action noise.

    The reasoning describes the state and the plan, never the actions taken: with
    probability ``options.generic_share`` one of ``generic_templates`` (boilerplate that
    fits any input; with ``options.generic_style`` "grammar", a sentence composed from
    ``generic_grammar`` instead), otherwise one of ``templates`` filled with the subclass's ``facts``.
    So reasoning can lose its input dependence while the actions still work.
    """

    templates: list[str] = []
    generic_templates: list[str] = []
    generic_grammar: list[list[list[str]]] = []  # patterns of slots of alternatives (compose)

    def __init__(self, env, rng: random.Random, persona: str | None):
        self.env, self.rng = env, rng
        self.persona = choose_persona(rng, persona, env.options.careful_share)

    def __call__(self) -> DemoTurn:
        plan = self.env.solve() if self.persona == "careful" else self.env.greedy_plan()
        plan = plan or [self.rng.choice(ACTIONS)]
        actions = add_noise(self.rng, self.turn_actions(plan), self.env.options.demo_noise)
        return DemoTurn(self.reasoning(plan), actions)

    def reasoning(self, plan: list[str]) -> str:
        """One turn's reasoning for the current state (draws from ``self.rng``)."""
        if self.rng.random() < self.env.options.generic_share:
            if self.env.options.generic_style == "grammar":
                return compose(self.rng, self.generic_grammar)
            return phrase(self.rng, self.generic_templates)
        return phrase(self.rng, self.templates, **self.facts(plan))

    def turn_actions(self, plan: list[str]) -> list[str]:
        """The part of ``plan`` played this turn: mostly two actions, sometimes one."""
        return plan[: turn_length(self.rng, len(plan))]

    def facts(self, plan: list[str]) -> dict[str, str]:
        """Template fields describing the current state and plan (may draw from ``self.rng``)."""
        raise NotImplementedError


def grid_words(grid: list[list[str]], words: dict[str, str]) -> str:
    """A picture read out: each row's tiles as one word each, a full stop after each row
    ("ice me hole goal . ice ice ice ice . ..."). One word per tile, in the picture's
    order, so reading the picture is copying it tile by tile."""
    return " ".join(" ".join(words[symbol] for symbol in row) + " ." for row in grid)


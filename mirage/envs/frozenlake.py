"""FrozenLake: walk from the start to the goal on a grid of ice without falling into a hole.

Random square maps (``FrozenLakeOptions``): start and goal at Manhattan distance >= 2,
every other cell a hole with probability ``hole_prob``, regenerated until a safe path
exists. With probability ``slip`` a move goes in one of the two perpendicular directions
instead (uniformly); moving into the border leaves the agent in place. Reward 1 on
reaching the goal (done, success), 0 otherwise; a hole ends the episode without success.

``FrozenLake.from_grid(rows)`` builds a hand-made map for tests (see its docstring).
"""

from __future__ import annotations

import random

from pydantic import Field

from mirage.core.rl.env import Demonstrator, Environment, StepOutcome
from mirage.core.rl.image import IMAGE_MARK, Image
from mirage.envs.phrasing import (
    ACTIONS,
    MOVES,
    PERPENDICULAR,
    PersonaDemonstrator,
    GridOptions,
    bfs_path,
    check_action,
    demo_success_rates,
    generic_grammar,
    grid_words,
    neighbour_line,
    relative,
)
from mirage.envs.sprites import FROZENLAKE_TILES, draw_grid

Cell = tuple[int, int]


# Every state template names the agent's and the goal's cells, so the reasoning
# identifies its map; the generic ones fit any map (docs/warm-start.md).
_TEMPLATES = [
    "I am at row {r} col {c} ; the goal is at row {gr} col {gc} .",
    "The goal at row {gr} col {gc} is {goal_dir} ; I am at row {r} col {c} .",
    "From row {r} col {c} the goal at row {gr} col {gc} is {steps} steps away .",
    "A hole is {hole_dir} ; I am at row {r} col {c} , the goal at row {gr} col {gc} .",
]
# With the neighbour line hidden (options.neighbours false) the reasoning reads it out.
_LOOK_TEMPLATES = [
    "{look} The goal is {goal_dir} .",
    "{look} I am at row {r} col {c} .",
]
# Image mode: the reasoning first reads the picture out, tile by tile (PICTURE_WORDS),
# then plans from what it read; short enough for the default 40 new tokens.
_PICTURE_TEMPLATES = [
    "{picture} The goal is {goal_dir} .",
    "{picture} I am at row {r} col {c} .",
]
PICTURE_WORDS = {"P": "me", "G": "goal", "O": "hole", "_": "ice"}
"""The word each tile of the picture is read out as (one word per tile)."""
_GENERIC = [
    "Let me move toward the goal .",
    "Avoid the holes and head for the goal .",
    "I must be careful on the ice .",
    "Think before every step .",
    "Stay away from the holes .",
    "The goal cannot be far .",
]
# generic_style "grammar": 4,416 input-agnostic sentences, none naming a move.
_GRAMMAR = generic_grammar(
    verbs=["move", "head", "walk", "step", "go", "slide", "travel", "keep going"],
    places=["toward the goal", "across the ice", "past the holes", "along a safe path",
            "over the frozen lake", "to the far side", "on solid ice", "around the danger"],
    warnings=["the ice is slippery", "holes are dangerous", "the goal is waiting", "every step counts",
              "the lake is cold", "patience pays off", "a slip could hurt", "the path is long"],
    resolutions=["I stay focused", "I think ahead", "I keep calm", "I plan each step", "I watch my feet",
                 "I avoid mistakes", "I trust the plan", "I take my time"],
)


class FrozenLakeOptions(GridOptions):
    """Map size, hole density and slip probability (0 = deterministic moves)."""

    size: int = Field(4, ge=2)
    hole_prob: float = Field(0.2, ge=0, lt=1)
    slip: float = Field(0.0, ge=0, le=1)
    # Issue #32's lever (d): without the line, what lies one step away must be read from
    # the grid, and the demonstrations read it out in their reasoning before they move,
    # so reasoning that stops depending on the input costs success.
    neighbours: bool = Field(
        True, description="show what lies one step away in each direction (the prompt's last "
        "line); without it the demonstrated reasoning names those cells instead"
    )


class FrozenLake(Environment):
    """The FrozenLake grid world; see the module docstring for the rules."""

    name = "frozenlake"
    version = "4"
    Options = FrozenLakeOptions
    action_names = ACTIONS
    instruction = (
        "FrozenLake : reach the goal G without falling into a hole O ; the ice may make "
        "you slip sideways . Symbols : _ frozen ice , O hole , G goal , P you ."
    )

    image_instruction = (
        "FrozenLake : reach the goal without falling into a hole ; the ice may make you slip "
        "sideways . The picture shows the lake : light ice , dark round holes , a gold diamond "
        "goal , and you in red ."
    )

    options: FrozenLakeOptions

    def __init__(self, options: FrozenLakeOptions | None = None):
        super().__init__(options)
        if self.options.observation == "image":
            self.instruction = self.image_instruction
        self._load(self.options.size, self.options.size, (0, 0), (0, 0), frozenset(), 0)

    @classmethod
    def from_grid(cls, rows: list[str], options: FrozenLakeOptions | None = None,
                  seed: int = 0) -> FrozenLake:
        """Build an episode from a hand-made map, e.g. ``["P _ O", "_ _ _", "O _ G"]``.

        Symbols: ``P`` start, ``G`` goal, ``O`` hole, ``_`` frozen; spaces are ignored.
        ``seed`` seeds the slip randomness; ``options.size`` is not used.
        """
        env = cls(options)
        grid = [row.replace(" ", "") for row in rows]
        cells = {(r, c): ch for r, row in enumerate(grid) for c, ch in enumerate(row)}
        find = [cell for cell, ch in cells.items() if ch == "P"]
        goal = [cell for cell, ch in cells.items() if ch == "G"]
        if len(find) != 1 or len(goal) != 1 or set(cells.values()) - set("PGO_"):
            raise ValueError("a map needs one P, one G, and only the symbols P G O _")
        if len({len(row) for row in grid}) != 1:
            raise ValueError("all map rows must have the same length")
        holes = frozenset(cell for cell, ch in cells.items() if ch == "O")
        env._load(len(grid), len(grid[0]), find[0], goal[0], holes, seed)
        return env

    def _load(self, height: int, width: int, start: Cell, goal: Cell,
              holes: frozenset[Cell], seed: int) -> None:
        self.height, self.width = height, width
        self.player, self.goal, self.holes = start, goal, holes
        self.done = False
        self._success = False
        # A str seed is hashed with SHA-512 by random.Random: stable across processes.
        self._slip_rng = random.Random(f"frozenlake:{seed}:slip")

    def reset(self, seed: int) -> str:
        """Generate the map for ``seed`` (a fixed function of the seed and options)."""
        size, rng = self.options.size, random.Random(f"frozenlake:{seed}:map")
        cells = [(r, c) for r in range(size) for c in range(size)]
        while True:
            start = rng.choice(cells)
            goal = rng.choice([x for x in cells if _manhattan(x, start) >= 2])
            holes = frozenset(
                x for x in cells if x not in (start, goal) and rng.random() < self.options.hole_prob
            )
            self._load(size, size, start, goal, holes, seed)
            if self.solve() is not None:
                return self.render()

    def seed_transitions(self, seed: int) -> None:
        """Give this sample its own slip noise; the map stays the one ``reset`` made."""
        self._slip_rng = random.Random(f"frozenlake:{seed}:slip-sample")

    def step(self, action: str) -> StepOutcome:
        """Move once (maybe slipping); ValueError on an invalid action or a finished episode."""
        check_action(action)
        if self.done:
            raise ValueError("the episode is over; call reset() before stepping again")
        if self._slip_rng.random() < self.options.slip:
            action = self._slip_rng.choice(PERPENDICULAR[action])
        self.player = self._moved(self.player, action)
        if self.player in self.holes:
            self.done = True
        elif self.player == self.goal:
            self.done = self._success = True
        return StepOutcome(reward=1.0 if self._success else 0.0, done=self.done,
                           success=self._success)

    @property
    def success(self) -> bool:
        """Whether the agent has reached the goal."""
        return self._success

    def symbol_grid(self) -> list[list[str]]:
        """The map's symbols, row by row: P you, G goal, O hole, _ frozen ice."""
        return [["P" if (r, c) == self.player else "G" if (r, c) == self.goal
                 else "O" if (r, c) in self.holes else "_" for c in range(self.width)]
                for r in range(self.height)]

    def render(self) -> str:
        """The grid (one row per line, cells separated by spaces), the coordinates, and
        what lies one step away in each direction (a tiny policy cannot be expected to
        find the cell below it in a flattened grid; with this line, avoiding a hole is
        a decision RL can learn within tens of iterations) unless ``options.neighbours``
        is false. In image mode only ``IMAGE_MARK``: the picture is the whole state."""
        if self.options.observation == "image":
            return IMAGE_MARK
        lines = [" ".join(row) for row in self.symbol_grid()]
        pr, pc = self.player
        gr, gc = self.goal
        lines.append(f"Player at row {pr} col {pc} . Goal at row {gr} col {gc} .")
        if self.options.neighbours:
            lines.append(neighbour_line(self._describe))
        return "\n".join(lines)

    def render_image(self) -> Image | None:
        """The map as a picture of 16-pixel tiles (mirage/envs/sprites.py) in image mode."""
        if self.options.observation != "image":
            return None
        return draw_grid(self.symbol_grid(), FROZENLAKE_TILES)

    def _describe(self, action: str) -> str:
        cell = self._moved(self.player, action)
        if cell == self.player:
            return "edge"
        return "goal" if cell == self.goal else "hole" if cell in self.holes else "ice"

    def solve(self) -> list[str] | None:
        """Shortest hole-free path to the goal, ignoring slip; None if there is none."""
        if self.player in self.holes:
            return None
        def successors(cell: Cell):
            for action in ACTIONS:
                nxt = self._moved(cell, action)
                if nxt not in self.holes:
                    yield action, nxt

        return bfs_path(self.player, successors, lambda cell: cell == self.goal)

    def greedy_plan(self) -> list[str]:
        """The careless plan: straight to the goal, vertical moves first, ignoring holes."""
        dr, dc = self.goal[0] - self.player[0], self.goal[1] - self.player[1]
        return ["Down" if dr > 0 else "Up"] * abs(dr) + ["Right" if dc > 0 else "Left"] * abs(dc)

    def demonstrator(self, rng: random.Random, persona: str | None = None) -> Demonstrator:
        """Warm-start policy for this episode: a 'careful' (BFS) or 'careless' (greedy) persona.

        The persona is drawn with ``rng`` (careful with ``options.careful_share``) unless forced; ``options.demo_noise``
        of actions are random.
        The returned callable exposes ``.persona``.
        """
        return _Demo(self, rng, persona)

    def _moved(self, cell: Cell, action: str) -> Cell:
        dr, dc = MOVES[action]
        r, c = cell[0] + dr, cell[1] + dc
        return (r, c) if 0 <= r < self.height and 0 <= c < self.width else cell


class _Demo(PersonaDemonstrator):
    templates, generic_templates, generic_grammar = _TEMPLATES, _GENERIC, _GRAMMAR

    def __init__(self, env, rng: random.Random, persona: str | None):
        super().__init__(env, rng, persona)
        if env.options.observation == "image":
            self.templates = _PICTURE_TEMPLATES  # the reasoning reads the picture, the whole state
        elif not env.options.neighbours:
            self.templates = _LOOK_TEMPLATES  # the reasoning reads out what the prompt does not say

    def turn_actions(self, plan: list[str]) -> list[str]:
        """Both personas stop before a second move into a hole: the observation shows only
        the cells one step away, so a careless mistake is always a visible one (stepping
        onto a hole the prompt names), which is a decision RL can learn to fix."""
        actions = super().turn_actions(plan)
        env = self.env
        if len(actions) == 2 and env._moved(env._moved(env.player, actions[0]), actions[1]) in env.holes:
            return actions[:1]
        return actions

    def facts(self, plan: list[str]) -> dict[str, str]:
        env = self.env
        (r, c), (gr, gc) = env.player, env.goal
        facts = dict(r=str(r), c=str(c), gr=str(gr), gc=str(gc),
                     goal_dir=relative(gr - r, gc - c), steps=str(len(plan)),
                     look=neighbour_line(env._describe), picture=grid_words(env.symbol_grid(), PICTURE_WORDS))
        if self.persona == "careful":  # the careless persona does not look at holes
            near = [a for a in ACTIONS if env._moved(env.player, a) in env.holes]
            if near:
                facts["hole_dir"] = relative(*MOVES[self.rng.choice(near)])
        return facts


def _manhattan(a: Cell, b: Cell) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


if __name__ == "__main__":
    for slip in (0.0, 0.2, 0.5):
        print(f"slip {slip}:", demo_success_rates(FrozenLake, FrozenLakeOptions(slip=slip)))

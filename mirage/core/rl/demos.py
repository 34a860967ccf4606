"""Demonstrations from an environment's own demonstrator, played through the turn protocol."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from mirage.core.config.run_config import EnvConfig
from mirage.core.rl.env import Environment
from mirage.core.rl.episode import apply_response, build_context, context_images, format_response, start_episode
from mirage.core.rl.image import Image

DEMO_SEED_BASE = 50_000_000


@dataclass
class Demonstrations:
    """(context, response) training pairs and the demonstrators' own success rate."""

    pairs: list[tuple[str, str]]
    episodes: int
    success_rate: float
    images: list[tuple[Image, ...]] = field(default_factory=list)
    """The pictures each pair's context shows (image mode; empty tuples for text)."""


def collect_demonstrations(
    env_cls: type[Environment], options, config: EnvConfig, episodes: int, seed: int
) -> Demonstrations:
    """Play ``episodes`` demonstrator episodes; seeds are disjoint from training and
    validation seeds."""
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    images: list[tuple[Image, ...]] = []
    successes = 0
    for index in range(episodes):
        env = env_cls(options)
        state = start_episode(env, DEMO_SEED_BASE + seed * 1_000_003 + index, config)
        demonstrator = env.demonstrator(rng)
        while not state.done:
            turn = demonstrator()
            response = format_response(turn.reasoning, turn.actions[: config.max_actions_per_turn])
            pairs.append((build_context(state, config), response))
            images.append(tuple(context_images(state, config)))
            apply_response(state, response, config)
        successes += env.success
    return Demonstrations(pairs, episodes, successes / max(episodes, 1), images)

"""The best first-turn retrieval accuracy the demonstrators' own reasoning allows.

A policy that samples reasoning exactly as the demonstrators do can at best retrieve a
reasoning's prompt by Bayes' rule: among the batch's P prompts, pick the one under which
that reasoning is most likely. With the demonstrators' distribution p(Z|X) estimated by
Monte Carlo (``draws`` fresh demonstrator turns per prompt), the ceiling is the mean over
a second, independent set of ``draws`` reasonings per prompt of the credit 1/|ties| when
the own prompt is among the most likely ones, else 0: the retrieval accuracy of PAPER.md
section 2 for a perfect imitator. A reasoning that fits every prompt alike (a generic
sentence) earns 1/P, chance, in expectation; scoring draws that did not estimate the
table keeps sampling noise from favouring the own prompt.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from mirage.core.config.run_config import EnvConfig
from mirage.core.rl.env import Environment
from mirage.core.rl.episode import build_context, start_episode

CEILING_SEED_BASE = 70_000_000  # disjoint from training, validation and demonstration seeds


@dataclass
class Ceiling:
    """Retrieval ceiling of the demonstrators' first-turn reasoning at ``prompts`` = P."""

    retrieval: float
    chance: float
    prompts: int
    batches: int
    draws: int
    ambiguous_share: float  # share of draws that more than one prompt could have produced


def first_turn_reasonings(env_cls: type[Environment], options, config: EnvConfig, seed: int,
                          draws: int, rng: random.Random) -> tuple[str, Counter[str]]:
    """The first-turn prompt of episode ``seed`` and ``draws`` demonstrated reasonings for it,
    each from a fresh demonstrator (so its persona is drawn anew, as in the demonstrations)."""
    env = env_cls(options)
    prompt = build_context(start_episode(env, seed, config), config)
    return prompt, Counter(env.demonstrator(rng)().reasoning for _ in range(draws))


def retrieval_ceiling(env_cls: type[Environment], options, config: EnvConfig, *, prompts: int = 16,
                      batches: int = 8, draws: int = 300, seed: int = 0) -> Ceiling:
    """Monte Carlo ceiling over ``batches`` batches of ``prompts`` distinct prompts."""
    rng = random.Random(seed)
    total = credited = shared = 0.0
    next_seed = CEILING_SEED_BASE + seed * 100_003
    for _ in range(batches):
        columns: dict[str, tuple[Counter[str], Counter[str]]] = {}
        while len(columns) < prompts:  # identical prompts are one column, as in the proxies
            prompt, table = first_turn_reasonings(env_cls, options, config, next_seed, draws, rng)
            _, scored = first_turn_reasonings(env_cls, options, config, next_seed, draws, rng)
            next_seed += 1
            columns.setdefault(prompt, (table, scored))
        tables = [table for table, _ in columns.values()]
        for own, (_, scored) in enumerate(columns.values()):
            for reasoning, times in scored.items():
                likelihoods = [table[reasoning] / draws for table in tables]
                best = max(likelihoods)
                winners = [j for j, value in enumerate(likelihoods) if value == best]
                total += times
                credited += times * (own in winners) / len(winners)
                shared += times * (sum(value > 0 for value in likelihoods) > 1)
    return Ceiling(credited / total, 1.0 / prompts, prompts, batches, draws, shared / total)

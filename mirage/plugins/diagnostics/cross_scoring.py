"""In-batch cross-scoring (PAPER.md sections 2 and 6): L[n, j] = log p(Z_n | X_j).

Every reasoning Z_n of a scope's turns is teacher-forced after every distinct prompt X_j
of the same turns (X: the context up to and including ``<think>``; Z: the reasoning
between the tags, re-encoded from its text). Prompts with identical token ids are one
column by default; with ``columns: separate`` (the reference code's convention,
docs/conventions.md) each group or sampled turn has its own column and a signature per
column says which columns hold one prompt. The scoring goes through the ``mirage_cross_score`` hook, whose default reuses
each prompt's key/value cache for all the reasonings scored against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from mirage.core.rl.batch import Batch, Turn
from mirage.core.rl.prompt import prompt_key


@dataclass
class ScoredTurns:
    """A scope's cross-score matrix and what the proxies read beside it.

    ``logprobs``/``entropy``: ``[N, C]`` summed log-probs and summed policy entropies of
    the N non-empty reasonings under the C distinct prompts; ``lengths``: ``[N]`` |Z_n|;
    ``owners``: ``[N]`` the column of each reasoning's own prompt; ``signatures``: ``[C]``
    ids equal for columns holding one prompt, or None when every column is a distinct
    prompt (the default, merged columns).
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor
    lengths: torch.Tensor
    owners: torch.Tensor
    signatures: torch.Tensor | None = None


def assign_columns(contexts: list[list[int]], keys: list | None = None) -> tuple[list[list[int]], list[int]]:
    """The distinct contexts in first-seen order, and the column of each context. Two
    contexts are one when their ids and their pictures are (``Prompt.key``): in image
    mode different rooms share their prompt's words. With ``keys`` (one per context),
    contexts are one column when their keys are equal instead (``columns: separate``)."""
    index: dict = {}
    columns: list[list[int]] = []
    owners = []
    for position, ids in enumerate(contexts):
        key = prompt_key(ids) if keys is None else keys[position]
        if key not in index:
            index[key] = len(columns)
            columns.append(ids)
        owners.append(index[key])
    return columns, owners


def first_turns(batch: Batch) -> list[Turn]:
    """The first turn of every trajectory (columns: the P prompts)."""
    return [t.turns[0] for t in batch.trajectories if t.turns]


def first_turn_groups(batch: Batch) -> list[int]:
    """The prompt group of each of :func:`first_turns` (its column with ``columns: separate``)."""
    return [t.prompt_index for t in batch.trajectories if t.turns]


def sampled_turns(batch: Batch, count: int, seed: int) -> list[Turn]:
    """``count`` trajectories drawn uniformly without replacement (all of them when there
    are fewer), then one turn of each drawn uniformly; reproducible from ``seed``."""
    trajectories = [t for t in batch.trajectories if t.turns]
    rng = np.random.default_rng(np.random.SeedSequence([seed, batch.step, 0x7A5C]))
    chosen = rng.choice(len(trajectories), size=min(count, len(trajectories)), replace=False)
    return [trajectories[i].turns[int(rng.integers(len(trajectories[i].turns)))] for i in sorted(chosen)]


def drawn_turns(batch: Batch, count: int, seed: int, has_reasoning: Callable[[Turn], bool]) -> list[Turn]:
    """The reference code's trajectory sample (``trajectory_draws: with_replacement``):
    ``min(count, T)`` draws, T the turns with a reasoning; each draws one of the batch's
    trajectories uniformly and then one of its turns with a reasoning uniformly, both
    with replacement, and a draw whose trajectory has no such turn gives nothing.
    Reproducible from ``seed``; the draws are in drawing order."""
    candidates = [[turn for turn in t.turns if has_reasoning(turn)] for t in batch.trajectories]
    total = sum(map(len, candidates))
    rng = np.random.default_rng(np.random.SeedSequence([seed, batch.step, 0x7A5D]))
    drawn = []
    for _ in range(min(count, total)):
        turns = candidates[int(rng.integers(len(candidates)))]
        if turns:
            drawn.append(turns[int(rng.integers(len(turns)))])
    return drawn


def cross_score(run, turns: list[Turn], reasonings: list[list[int]], groups: list | None = None,
                drop_empty: bool = False) -> ScoredTurns | None:
    """Score the non-empty ``reasonings`` (token ids of each turn's Z) under the distinct
    prompts of ``turns``; None when fewer than two columns or no reasoning remain (no
    comparison to make). A prompt whose reasonings are all empty is still a column,
    unless ``drop_empty``. With ``groups`` (a column key per turn, ``columns: separate``)
    turns of equal key share a column, the first one's prompt, and the result's
    ``signatures`` say which columns hold identical prompts."""
    scored = [i for i, z in enumerate(reasonings) if z]
    chosen = scored if drop_empty else range(len(turns))
    columns, column_of = assign_columns([turns[i].prompt for i in chosen],
                                        None if groups is None else [groups[i] for i in chosen])
    owners = dict(zip(chosen, column_of))
    if len(columns) < 2 or not scored:
        return None
    signatures = None
    if groups is not None:
        # identical prompts get one id; each is scored once and its scores fill every
        # column that holds it, so those columns tie exactly
        columns, ids = assign_columns(columns)
        signatures = torch.tensor(ids)

    def score_rows(responses: list[list[int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        scores = run.hook.mirage_cross_score(run=run, contexts=columns, responses=responses)
        logprobs, entropy = scores.logprobs.double(), scores.entropy.double()
        if signatures is not None:
            logprobs, entropy = logprobs[:, signatures], entropy[:, signatures]
        return list(zip(logprobs, entropy))

    # each rank scores its share of the responses under every prompt (a data-parallel
    # run); every rank gets the whole matrix
    rows = run.world.map_shares(score_rows, [reasonings[i] for i in scored])
    return ScoredTurns(
        logprobs=torch.stack([logprobs for logprobs, _ in rows]),
        entropy=torch.stack([entropy for _, entropy in rows]),
        lengths=torch.tensor([len(reasonings[i]) for i in scored]),
        owners=torch.tensor([owners[i] for i in scored]),
        signatures=signatures,
    )

"""In-batch cross-scoring (PAPER.md sections 2 and 6): L[n, j] = log p(Z_n | X_j).

Every reasoning Z_n of a scope's turns is teacher-forced after every distinct prompt X_j
of the same turns (X: the context up to and including ``<think>``; Z: the reasoning
between the tags, re-encoded from its text). Prompts with identical token ids are one
column. The scoring goes through the ``mirage_cross_score`` hook, whose default reuses
each prompt's key/value cache for all the reasonings scored against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mirage.core.rl.batch import Batch, Turn
from mirage.core.rl.prompt import prompt_key


@dataclass
class ScoredTurns:
    """A scope's cross-score matrix and what the proxies read beside it.

    ``logprobs``/``entropy``: ``[N, C]`` summed log-probs and summed policy entropies of
    the N non-empty reasonings under the C distinct prompts; ``lengths``: ``[N]`` |Z_n|;
    ``owners``: ``[N]`` the column of each reasoning's own prompt.
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor
    lengths: torch.Tensor
    owners: torch.Tensor


def assign_columns(contexts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct contexts in first-seen order, and the column of each context. Two
    contexts are one when their ids and their pictures are (``Prompt.key``): in image
    mode different rooms share their prompt's words."""
    index: dict[tuple, int] = {}
    columns: list[list[int]] = []
    owners = []
    for ids in contexts:
        key = prompt_key(ids)
        if key not in index:
            index[key] = len(columns)
            columns.append(ids)
        owners.append(index[key])
    return columns, owners


def first_turns(batch: Batch) -> list[Turn]:
    """The first turn of every trajectory (columns: the P prompts)."""
    return [t.turns[0] for t in batch.trajectories if t.turns]


def sampled_turns(batch: Batch, count: int, seed: int) -> list[Turn]:
    """``count`` trajectories drawn uniformly without replacement (all of them when there
    are fewer), then one turn of each drawn uniformly; reproducible from ``seed``."""
    trajectories = [t for t in batch.trajectories if t.turns]
    rng = np.random.default_rng(np.random.SeedSequence([seed, batch.step, 0x7A5C]))
    chosen = rng.choice(len(trajectories), size=min(count, len(trajectories)), replace=False)
    return [trajectories[i].turns[int(rng.integers(len(trajectories[i].turns)))] for i in sorted(chosen)]


def cross_score(run, turns: list[Turn], reasonings: list[list[int]]) -> ScoredTurns | None:
    """Score the non-empty ``reasonings`` (token ids of each turn's Z) under the distinct
    prompts of ``turns``; None when fewer than two prompts or no reasoning remain (no
    comparison to make). A prompt whose reasonings are all empty is still a column."""
    columns, owners = assign_columns([turn.prompt for turn in turns])
    scored = [i for i, z in enumerate(reasonings) if z]
    if len(columns) < 2 or not scored:
        return None
    def score_rows(responses: list[list[int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        scores = run.hook.mirage_cross_score(run=run, contexts=columns, responses=responses)
        return list(zip(scores.logprobs.double(), scores.entropy.double()))

    # each rank scores its share of the responses under every prompt (a data-parallel
    # run); every rank gets the whole matrix
    rows = run.world.map_shares(score_rows, [reasonings[i] for i in scored])
    return ScoredTurns(
        logprobs=torch.stack([logprobs for logprobs, _ in rows]),
        entropy=torch.stack([entropy for _, entropy in rows]),
        lengths=torch.tensor([len(reasonings[i]) for i in scored]),
        owners=torch.tensor([owners[i] for i in scored]),
    )

"""Retrieval accuracy and Recall@k of a cross-score matrix, and their chance levels
(PAPER.md sections 2 and 6; the conventions in docs/conventions.md).

A reasoning is retrieved at k when a column holding its own prompt is among the k
best-scoring columns. ``signatures`` ([C] ids, equal for columns whose prompts are
identical) lets several columns hold one prompt (``columns: separate``); None means
every column is a distinct prompt. Ties are broken uniformly at random, in expectation
(``expected``), in favour of the lower column index (``first``), or as ``torch.topk``
orders them (``topk``, the reference code's Recall@k).
"""

from __future__ import annotations

import math

import torch

from mirage.plugins.diagnostics.conventions import RetrievalTies


def recall_at(scores: torch.Tensor, owner: torch.Tensor, k: int) -> torch.Tensor:
    """``[N]`` chance that reasoning n's own column is among the top ``k`` of
    ``scores[n]`` ([N, C]) when ties are broken uniformly at random: with ``above``
    columns strictly higher and ``tied`` equal to it (itself included), that is
    clamp(k - above, 0, tied) / tied. A row scoring every column alike gets k / C."""
    own = scores.gather(1, owner[:, None])
    above = (scores > own).sum(1)
    tied = (scores == own).sum(1)
    return torch.minimum((k - above).clamp(min=0), tied).double() / tied.double()


def _own_prompt(scores: torch.Tensor, owner: torch.Tensor,
                signatures: torch.Tensor | None) -> torch.Tensor:
    """``[N, C]`` True where column j holds reasoning n's own prompt."""
    columns = torch.arange(scores.size(1))
    if signatures is None:
        return columns[None, :] == owner[:, None]
    return signatures[None, :] == signatures[owner][:, None]


def recall_first_index(scores: torch.Tensor, owner: torch.Tensor, k: int,
                       signatures: torch.Tensor | None = None) -> torch.Tensor:
    """``[N]`` 1.0 where a column holding n's prompt is among the first ``k`` columns of
    ``scores[n]`` ([N, C]) ranked by score, ties by lower column index; else 0.0."""
    own = _own_prompt(scores, owner, signatures)
    best = scores.masked_fill(~own, -math.inf).max(1).values  # [N] n's best own column
    above = (scores > best[:, None]).sum(1)
    tied = scores == best[:, None]
    index = torch.arange(scores.size(1))[None, :].expand_as(scores)
    first_own = index.masked_fill(~(tied & own), scores.size(1)).min(1).values  # [N]
    before = (tied & (index < first_own[:, None])).sum(1)
    return ((above + before) < k).double()


TOPK_WIDTH = 8  # the reference code ranks the best min(8, C) columns once for every k


def recall_topk(scores: torch.Tensor, owner: torch.Tensor, k: int,
                signatures: torch.Tensor | None = None) -> torch.Tensor:
    """``[N]`` 1.0 where a column holding n's prompt is among the first ``k`` of the
    columns ``torch.topk`` ranks best in ``scores[n]`` ([N, C]), over the best min(8, C)
    (RAGEN's Recall@k, whose order among tied columns is torch's); k = 1 is the first
    maximal column (argmax, :func:`recall_first_index`)."""
    if k == 1:
        return recall_first_index(scores, owner, 1, signatures)
    width = min(TOPK_WIDTH, scores.size(1))
    top = torch.topk(scores, width, dim=1).indices[:, : min(k, width)]
    return _own_prompt(scores, owner, signatures).gather(1, top).any(1).double()


def recall_expected(scores: torch.Tensor, owner: torch.Tensor, k: int,
                    signatures: torch.Tensor) -> torch.Tensor:
    """``[N]`` chance that a column holding n's prompt is among the top ``k`` of
    ``scores[n]`` ([N, C]) under uniform tie-breaking, when ``signatures`` ([C]) may give
    one prompt several columns: with ``above`` columns strictly above n's best own column,
    ``tied`` equal to it and ``mine`` of those holding n's prompt, r = clamp(k - above, 0,
    tied) of the tied columns are drawn, and the chance is 1 - comb(tied - mine, r) /
    comb(tied, r) (:func:`recall_at`'s r / tied when mine = 1)."""
    own = _own_prompt(scores, owner, signatures)
    best = scores.masked_fill(~own, -math.inf).max(1).values
    above = (scores > best[:, None]).sum(1).tolist()
    tied_columns = scores == best[:, None]
    tied = tied_columns.sum(1).tolist()
    mine = (tied_columns & own).sum(1).tolist()
    chances = []
    for a, t, m in zip(above, tied, mine):
        r = min(max(k - a, 0), t)
        chances.append(r / t if m == 1 else 1.0 - math.comb(t - m, r) / math.comb(t, r))
    return torch.tensor(chances, dtype=torch.float64)


def recall(scores: torch.Tensor, owner: torch.Tensor, k: int, ties: RetrievalTies = "expected",
           signatures: torch.Tensor | None = None) -> torch.Tensor:
    """``[N]`` Recall@k per reasoning under the ``ties`` convention (k = 1: retrieval)."""
    if ties == "first":
        return recall_first_index(scores, owner, k, signatures)
    if ties == "topk":
        return recall_topk(scores, owner, k, signatures)
    if ties != "expected":
        raise ValueError(f"unknown retrieval_ties {ties!r}; valid: expected, first, topk")
    if signatures is None:
        return recall_at(scores, owner, k)
    return recall_expected(scores, owner, k, signatures)


def chance_levels(columns: int, owner: torch.Tensor, signatures: torch.Tensor | None,
                  ks: tuple[int, ...]) -> dict[str, float]:
    """Retrieval's chance level and Recall@k's for k in ``ks``, over ``columns`` columns.

    Distinct prompts (``signatures`` None): 1 / C and min(k, C) / C. Several columns per
    prompt: the mean over reasonings of the share s_n of columns holding n's prompt, and
    min(1, mean(s) min(k, C)) (the reference code's reading), which equal the former when
    every prompt has one column."""
    if signatures is None:
        shared = 1.0
    else:
        counts = (signatures[None, :] == signatures[owner][:, None]).sum(1)
        shared = float(counts.double().mean())
    levels = {"retrieval_chance": shared / columns}
    for k in ks:
        levels[f"recall@{k}_chance"] = min(1.0, shared * min(k, columns) / columns)
    return levels

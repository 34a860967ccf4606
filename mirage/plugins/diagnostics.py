"""Mutual-information proxies by in-batch cross-scoring (PAPER.md section 2), first-turn scope.

L[n, j] = log p(Z_n | X_j): every first-turn reasoning Z_n scored under every distinct
first-turn prompt X_j of the batch, teacher-forced through the score hook.
"""

from __future__ import annotations

import math

import torch

from mirage.core.batch import Batch
from mirage.core.config import RunConfig
from mirage.core.hookspecs import hookimpl


def mi_proxies(scores: torch.Tensor, lengths: torch.Tensor, owner: torch.Tensor) -> dict[str, float]:
    """MI proxies from a cross-score matrix.

    scores: [N, P] summed log-probs log p(Z_n | X_j); lengths: [N] token counts |Z_n|;
    owner: [N] the column of each reasoning's own prompt. Returns retrieval accuracy,
    its chance level, MI-Est (per token), MI-Seq-Est (per sequence), H(Z|X) and H(Z),
    per token; H(Z) = MI-Est + H(Z|X) holds exactly by construction.
    """
    n, p = scores.shape
    rows = torch.arange(n)
    matched = scores[rows, owner]
    marginal = torch.logsumexp(scores, dim=1) - math.log(p)
    per_token = lengths.clamp(min=1).to(scores.dtype)
    retrieval = (scores.argmax(dim=1) == owner).float().mean()
    return {
        "retrieval_acc": float(retrieval),
        "retrieval_chance": 1.0 / p,
        "mi_est": float(((matched - marginal) / per_token).mean()),
        "mi_seq_est": float((matched - marginal).mean()),
        "h_cond": float((-matched / per_token).mean()),
        "h_marg": float((-marginal / per_token).mean()),
    }


class MutualInformation:
    """First-turn MI proxies of the batch's own rollouts."""

    def __init__(self, config: RunConfig):
        self.config = config

    def measure(self, run, batch: Batch) -> dict[str, float]:
        prompts: dict[tuple[int, ...], int] = {}  # identical prompt ids share a column
        reasonings, owners = [], []
        for group in batch.groups:
            for trajectory in group.trajectories:
                if not trajectory.turns:
                    continue
                first = trajectory.turns[0]
                column = prompts.setdefault(tuple(first.context_ids), len(prompts))
                reasoning = run.backend.encode(first.reasoning)
                if reasoning:  # an empty Z has no likelihood to compare
                    reasonings.append(reasoning)
                    owners.append(column)
        if len(prompts) < 2 or not reasonings:
            return {}
        columns = [list(ids) for ids in prompts]
        contexts = [columns[j] for _ in reasonings for j in range(len(columns))]
        responses = [z for z in reasonings for _ in columns]
        logprobs = run.hook.mirage_score(run=run, contexts=contexts, responses=responses)
        sums = torch.tensor([sum(lp) for lp in logprobs], dtype=torch.float64).view(len(reasonings), len(columns))
        lengths = torch.tensor([len(z) for z in reasonings])
        metrics = mi_proxies(sums, lengths, torch.tensor(owners))
        return {f"mi/first_turn/{name}": value for name, value in metrics.items()}


@hookimpl
def mirage_register_diagnostics(register):
    register("mi", MutualInformation)

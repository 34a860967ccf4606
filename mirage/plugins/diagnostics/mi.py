"""The mutual-information proxies (PAPER.md sections 2 and 6), per scope.

From a cross-score matrix L[n, j] = log p(Z_n | X_j) (sums over Z_n's tokens) with
matched[n] = L[n, own(n)] and marginal[n] = logsumexp_j L[n, j] - log C:
retrieval accuracy and Recall@k, MI-Est (per token) and MI-Seq-Est (per sequence),
H(Z|X) and H(Z) in both normalisations, MI-ZScore and its EMA variant. Beside them,
from the same turns: policy entropy, reasoning length, format validity, valid thinking.
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field

from mirage.core.config.run_config import MIScope
from mirage.core.plugin_api.components import Diagnostic
from mirage.core.rl.batch import Batch, Turn
from mirage.plugins.diagnostics.cross_scoring import ScoredTurns, cross_score, first_turns, sampled_turns

RECALL_KS = (2, 4, 8)
EMA_STATE = "mi_marginal_std_ema"  # run.state key: {scope: EMA of std(marginal)}, checkpointed


def recall_at(scores: torch.Tensor, owner: torch.Tensor, k: int) -> torch.Tensor:
    """``[N]`` chance that reasoning n's own column is among the top ``k`` of
    ``scores[n]`` ([N, C]) when ties are broken uniformly at random: with ``above``
    columns strictly higher and ``tied`` equal to it (itself included), that is
    clamp(k - above, 0, tied) / tied. A row scoring every column alike gets k / C."""
    own = scores.gather(1, owner[:, None])
    above = (scores > own).sum(1)
    tied = (scores == own).sum(1)
    return torch.minimum((k - above).clamp(min=0), tied).double() / tied.double()


def matched_marginal(scores: torch.Tensor, owner: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N]`` matched L[n, own(n)] and marginal logsumexp_j L[n, j] - log C."""
    matched = scores[torch.arange(scores.size(0)), owner]
    marginal = torch.logsumexp(scores, dim=1) - math.log(scores.size(1))
    return matched, marginal


def mi_proxies(scores: torch.Tensor, lengths: torch.Tensor, owner: torch.Tensor,
               epsilon: float = 1e-3) -> dict[str, float]:
    """The proxies of one cross-score matrix.

    scores: [N, C] summed log-probs log p(Z_n | X_j); lengths: [N] token counts |Z_n|;
    owner: [N] the column of each reasoning's own prompt. Per-token values divide each
    reasoning's numbers by |Z_n| before averaging. H(Z) is computed as MI-Est + H(Z|X)
    (and H(Z) per sequence as MI-Seq-Est + H(Z|X) per sequence), so the identity of
    PAPER.md section 2 holds exactly; both equal -mean(marginal) up to rounding.
    MI-ZScore = mean((matched - marginal) / |Z|) / (std(marginal / |Z|) + epsilon), the
    std a population std over the batch (PAPER.md section 6).
    """
    scores = scores.double()
    columns = scores.size(1)
    matched, marginal = matched_marginal(scores, owner)
    tokens = lengths.clamp(min=1).double()
    mi_est = float(((matched - marginal) / tokens).mean())
    h_cond = float((-matched / tokens).mean())
    mi_seq_est = float((matched - marginal).mean())
    h_cond_seq = float((-matched).mean())
    metrics = {
        "retrieval_acc": float(recall_at(scores, owner, 1).mean()),
        "retrieval_chance": 1.0 / columns,
    }
    for k in RECALL_KS:
        metrics[f"recall@{k}"] = float(recall_at(scores, owner, k).mean())
        metrics[f"recall@{k}_chance"] = min(k, columns) / columns
    metrics |= {
        "mi_est": mi_est,
        "mi_seq_est": mi_seq_est,
        "h_cond": h_cond,
        "h_marg": mi_est + h_cond,
        "h_cond_seq": h_cond_seq,
        "h_marg_seq": mi_seq_est + h_cond_seq,
        "mi_zscore": mi_est / (marginal_spread(scores, lengths) + epsilon),
    }
    return metrics


def marginal_spread(scores: torch.Tensor, lengths: torch.Tensor) -> float:
    """Population std over the batch of the per-token marginal, the MI-ZScore's scale."""
    marginal = torch.logsumexp(scores.double(), dim=1) - math.log(scores.size(1))
    return float((marginal / lengths.clamp(min=1).double()).std(correction=0))


def ema(previous: float | None, value: float, alpha: float) -> float:
    """alpha * previous + (1 - alpha) * value; the first value starts the average."""
    return value if previous is None else alpha * previous + (1.0 - alpha) * value


def turn_metrics(turns: list[Turn], reasonings: list[list[int]]) -> dict[str, float]:
    """What the scope's turns look like, whether or not they can be cross-scored."""
    count = max(len(turns), 1)
    return {
        "reasoning_tokens": sum(len(z) for z in reasonings) / count,
        "format_valid": sum(t.format_ok for t in turns) / count,
        "valid_thinking": sum(bool(z) and "</think>" in t.response for t, z in zip(turns, reasonings)) / count,
    }


def policy_entropy(scored: ScoredTurns) -> float:
    """Mean over reasonings of the policy's per-token entropy along Z given its own X."""
    own = scored.entropy[torch.arange(scored.entropy.size(0)), scored.owners]
    return float((own / scored.lengths.clamp(min=1).double()).mean())


class MIOptions(BaseModel):
    """The ``mi`` diagnostic's options (``diagnostics.options.mi``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    scopes: list[MIScope] = Field(
        default_factory=lambda: ["first_turn", "trajectory"], min_length=1,
        description="MI proxy scopes: first turns, and a uniform sample of (trajectory, turn)",
    )
    trajectory_samples: int = Field(32, ge=2, description="turns sampled for the trajectory scope")
    zscore_epsilon: float = Field(1e-3, gt=0, description="MI-ZScore: added to std(marginal)")
    zscore_ema_alpha: float = Field(0.9, ge=0, lt=1, description="MI-ZScore-EMA: weight of the previous EMA")


class MutualInformation(Diagnostic):
    """The MI proxies of the batch's own rollouts, in every scope of its options."""

    Options = MIOptions

    def scope_turns(self, scope: str, batch: Batch) -> list[Turn]:
        if scope == "first_turn":
            return first_turns(batch)
        return sampled_turns(batch, self.options.trajectory_samples, self.config.seed)

    def measure(self, run, batch: Batch) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for scope in self.options.scopes:
            turns = self.scope_turns(scope, batch)
            if not turns:
                continue
            reasonings = [run.backend.encode(turn.reasoning) for turn in turns]
            values = turn_metrics(turns, reasonings)
            scored = cross_score(run, turns, reasonings)
            if scored is not None:
                values |= self.proxies(run, scope, scored)
            metrics |= {f"mi/{scope}/{name}": value for name, value in values.items()}
        return metrics

    def proxies(self, run, scope: str, scored: ScoredTurns) -> dict[str, float]:
        """The proxies of one scope; updates the scope's EMA of std(marginal) in
        ``run.state`` (saved with checkpoints, so a resumed run continues it)."""
        epsilon = self.options.zscore_epsilon
        values = mi_proxies(scored.logprobs, scored.lengths, scored.owners, epsilon)
        state = run.state.setdefault(EMA_STATE, {})
        spread = ema(state.get(scope), marginal_spread(scored.logprobs, scored.lengths),
                     self.options.zscore_ema_alpha)
        state[scope] = spread
        values["mi_zscore_ema"] = values["mi_est"] / (spread + epsilon)
        values["policy_entropy"] = policy_entropy(scored)
        return values

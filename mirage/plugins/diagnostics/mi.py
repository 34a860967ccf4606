"""The mutual-information proxies (PAPER.md sections 2 and 6), per scope.

From a cross-score matrix L[n, j] = log p(Z_n | X_j) (sums over Z_n's tokens) with
matched[n] = L[n, own(n)] and marginal[n] = logsumexp_j L[n, j] - log C:
retrieval accuracy and Recall@k, MI-Est (per token) and MI-Seq-Est (per sequence),
H(Z|X) and H(Z) in both normalisations, MI-ZScore (per token and per sequence) and its
EMA variant. Beside them, from the same turns: policy entropy, reasoning length, format
validity, valid thinking. Where MIRAGE and the reference code differ by convention, the
options say which (:mod:`.conventions`, docs/conventions.md); both per-token scales are
logged whichever is chosen.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from pydantic import BaseModel, ConfigDict, Field

from mirage.core.config.run_config import MIScope
from mirage.core.plugin_api.components import Diagnostic
from mirage.core.rl.batch import Batch, Turn
from mirage.plugins.diagnostics.conventions import (
    Columns, Convention, EmptyColumns, MIConventions, RetrievalTies, TokenMarginal,
    TrajectoryDraws, resolve,
)
from mirage.plugins.diagnostics.cross_scoring import (
    ScoredTurns, cross_score, drawn_turns, first_turn_groups, first_turns, sampled_turns,
)
from mirage.plugins.diagnostics.retrieval import chance_levels, recall, recall_at

__all__ = ["RECALL_KS", "MutualInformation", "MIOptions", "ema", "marginal_spread",
           "matched_marginal", "mi_proxies", "recall_at", "token_marginal"]

RECALL_KS = (2, 4, 8)
EMA_STATE = "mi_marginal_std_ema"  # run.state key: {scope: EMA of std(marginal)}, checkpointed
DEFAULT = MIConventions()


def matched_marginal(scores: torch.Tensor, owner: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N]`` matched L[n, own(n)] and marginal logsumexp_j L[n, j] - log C."""
    matched = scores[torch.arange(scores.size(0)), owner]
    marginal = torch.logsumexp(scores, dim=1) - math.log(scores.size(1))
    return matched, marginal


def token_marginal(scores: torch.Tensor, lengths: torch.Tensor, form: TokenMarginal) -> torch.Tensor:
    """``[N]`` per-token marginal of ``scores`` ([N, C] summed log-probs) with |Z_n| =
    ``lengths`` ([N]): (1/|Z_n|) (logsumexp_j L[n, j] - log C) (``of_sums``, PAPER.md
    section 2) or logsumexp_j (L[n, j] / |Z_n|) - log C (``of_means``, the reference
    code's). By the power-mean inequality the second is never above the first for
    |Z_n| >= 1, so MI-Est of means is never below MI-Est of sums."""
    scores = scores.double()
    tokens = lengths.clamp(min=1).double()
    if form == "of_sums":
        return (torch.logsumexp(scores, dim=1) - math.log(scores.size(1))) / tokens
    if form == "of_means":
        return torch.logsumexp(scores / tokens[:, None], dim=1) - math.log(scores.size(1))
    raise ValueError(f"unknown token_marginal {form!r}; valid: of_sums, of_means")


def mi_proxies(scores: torch.Tensor, lengths: torch.Tensor, owner: torch.Tensor,
               epsilon: float = 1e-3, conventions: MIConventions = DEFAULT,
               signatures: torch.Tensor | None = None) -> dict[str, float]:
    """The proxies of one cross-score matrix.

    scores: [N, C] summed log-probs log p(Z_n | X_j); lengths: [N] token counts |Z_n|;
    owner: [N] the column of each reasoning's own prompt; signatures: [C] ids equal for
    columns holding one prompt (None: every column a distinct prompt). Per-token values
    divide each reasoning's numbers by |Z_n| before averaging. H(Z) is computed as
    MI-Est + H(Z|X) (and H(Z) per sequence as MI-Seq-Est + H(Z|X) per sequence), so the
    identity of PAPER.md section 2 holds exactly; both equal -mean(marginal) up to rounding.
    MI-ZScore = mean((matched - marginal) / |Z|) / (std(marginal / |Z|) + epsilon), the
    std a population std over the batch (PAPER.md section 6); MI-ZScore-Seq the same per
    sequence. ``conventions`` picks the per-token marginal of ``mi_est``, ``mi_zscore`` and
    ``h_marg`` and how retrieval breaks ties; ``mi_est_of_sums``, ``mi_est_of_means`` and
    their MI-ZScores are both logged whichever is picked.
    """
    scores = scores.double()
    columns = scores.size(1)
    matched, marginal = matched_marginal(scores, owner)
    tokens = lengths.clamp(min=1).double()
    h_cond = float((-matched / tokens).mean())
    mi_seq_est = float((matched - marginal).mean())
    h_cond_seq = float((-matched).mean())
    ties = conventions.retrieval_ties
    metrics = {"retrieval_acc": float(recall(scores, owner, 1, ties, signatures).mean())}
    levels = chance_levels(columns, owner, signatures, RECALL_KS)
    metrics["retrieval_chance"] = levels["retrieval_chance"]
    for k in RECALL_KS:
        metrics[f"recall@{k}"] = float(recall(scores, owner, k, ties, signatures).mean())
        metrics[f"recall@{k}_chance"] = levels[f"recall@{k}_chance"]
    scales = {
        "of_sums": float(((matched - marginal) / tokens).mean()),
        "of_means": float((matched / tokens - token_marginal(scores, lengths, "of_means")).mean()),
    }
    zscores = {form: value / (marginal_spread(scores, lengths, form) + epsilon)
               for form, value in scales.items()}
    mi_est = scales[conventions.token_marginal]
    metrics |= {
        "mi_est": mi_est,
        "mi_seq_est": mi_seq_est,
        "h_cond": h_cond,
        "h_marg": mi_est + h_cond,
        "h_cond_seq": h_cond_seq,
        "h_marg_seq": mi_seq_est + h_cond_seq,
        "mi_zscore": zscores[conventions.token_marginal],
        "mi_zscore_seq": mi_seq_est / (float(marginal.std(correction=0)) + epsilon),
    }
    for form in scales:
        metrics[f"mi_est_{form}"] = scales[form]
        metrics[f"mi_zscore_{form}"] = zscores[form]
    return metrics


def marginal_spread(scores: torch.Tensor, lengths: torch.Tensor, form: TokenMarginal = "of_sums") -> float:
    """Population std over the batch of the per-token marginal (:func:`token_marginal`),
    the MI-ZScore's scale."""
    return float(token_marginal(scores, lengths, form).std(correction=0))


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
    """The ``mi`` diagnostic's options (``diagnostics.options.mi``). ``convention`` sets
    every convention at once; a convention given beside it wins (docs/conventions.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    scopes: list[MIScope] = Field(
        default_factory=lambda: ["first_turn", "trajectory"], min_length=1,
        description="MI proxy scopes: first turns, and a uniform sample of (trajectory, turn)",
    )
    trajectory_samples: int = Field(32, ge=2, description="turns sampled for the trajectory scope")
    zscore_epsilon: float = Field(1e-3, gt=0, description="MI-ZScore: added to std(marginal)")
    zscore_ema_alpha: float = Field(0.9, ge=0, lt=1, description="MI-ZScore-EMA: weight of the previous EMA")
    convention: Convention = Field(
        "mirage", description="every convention below at once: mirage (PAPER.md's formulas, "
        "MIRAGE's choices) or ragen (the reference code's); docs/conventions.md")
    token_marginal: Optional[TokenMarginal] = Field(
        None, description="per-token marginal of mi_est, mi_zscore, h_marg: of_sums "
        "(1/|Z|) log mean_j exp(L) or of_means log mean_j exp(L/|Z|) (default: the convention's)")
    columns: Optional[Columns] = Field(
        None, description="identical prompts: merged into one column, or separate columns "
        "(one per group / sampled turn) counting as hits (default: the convention's)")
    trajectory_draws: Optional[TrajectoryDraws] = Field(
        None, description="trajectory scope: trajectories without_replacement, or (trajectory, "
        "turn) pairs with_replacement among turns with a reasoning (default: the convention's)")
    empty_columns: Optional[EmptyColumns] = Field(
        None, description="a prompt whose reasonings are all empty: keep its column or drop it "
        "(default: the convention's)")
    retrieval_ties: Optional[RetrievalTies] = Field(
        None, description="exact ties in retrieval: expected credit, the first column wins, or "
        "topk (argmax for retrieval, torch.topk's order for Recall@k, as the reference code "
        "ranks) (default: the convention's)")
    check_at_step_zero: Optional[bool] = Field(
        None, description="the proxies also run at step 0, the starting policy (default: the "
        "convention's; ragen starts at step 1)")

    def conventions(self) -> MIConventions:
        """The conventions these options choose."""
        return resolve(self.convention, token_marginal=self.token_marginal, columns=self.columns,
                       trajectory_draws=self.trajectory_draws, empty_columns=self.empty_columns,
                       retrieval_ties=self.retrieval_ties, check_at_step_zero=self.check_at_step_zero)


class MutualInformation(Diagnostic):
    """The MI proxies of the batch's own rollouts, in every scope of its options."""

    Options = MIOptions

    def __init__(self, config, options: BaseModel):
        super().__init__(config, options)
        self.conventions = options.conventions()

    def scope_turns(self, run, scope: str, batch: Batch) -> tuple[list[Turn], list[int]]:
        """The scope's turns and, per turn, its column key for ``columns: separate`` (its
        group in the first-turn scope, its own draw in the trajectory scope)."""
        if scope == "first_turn":
            return first_turns(batch), first_turn_groups(batch)
        count, seed = self.options.trajectory_samples, self.config.seed
        if self.conventions.trajectory_draws == "with_replacement":
            turns = drawn_turns(batch, count, seed, lambda turn: bool(run.backend.encode(turn.reasoning)))
        else:
            turns = sampled_turns(batch, count, seed)
        return turns, list(range(len(turns)))

    def measure(self, run, batch: Batch) -> dict[str, float]:
        if batch.step == 0 and not self.conventions.check_at_step_zero:
            return {}
        metrics: dict[str, float] = {}
        for scope in self.options.scopes:
            turns, groups = self.scope_turns(run, scope, batch)
            if not turns:
                continue
            reasonings = [run.backend.encode(turn.reasoning) for turn in turns]
            values = turn_metrics(turns, reasonings)
            conventions = self.conventions
            scored = cross_score(run, turns, reasonings,
                                 groups=groups if conventions.columns == "separate" else None,
                                 drop_empty=conventions.empty_columns == "drop")
            if scored is not None:
                values |= self.proxies(run, scope, scored)
            metrics |= {f"mi/{scope}/{name}": value for name, value in values.items()}
        return metrics

    def proxies(self, run, scope: str, scored: ScoredTurns) -> dict[str, float]:
        """The proxies of one scope; updates the scope's EMA of std(marginal) in
        ``run.state`` (saved with checkpoints, so a resumed run continues it)."""
        epsilon = self.options.zscore_epsilon
        form = self.conventions.token_marginal
        values = mi_proxies(scored.logprobs, scored.lengths, scored.owners, epsilon,
                            self.conventions, scored.signatures)
        state = run.state.setdefault(EMA_STATE, {})
        spread = ema(state.get(scope), marginal_spread(scored.logprobs, scored.lengths, form),
                     self.options.zscore_ema_alpha)
        state[scope] = spread
        values["mi_zscore_ema"] = values["mi_est"] / (spread + epsilon)
        values["policy_entropy"] = policy_entropy(scored)
        return values

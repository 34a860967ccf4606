"""The MI proxies' conventions: MIRAGE's defaults beside the reference code's (docs/conventions.md).

PAPER.md's formulas leave choices open that RAGEN's code (which drew the paper's figures)
settles differently from MIRAGE. Each is one option of the ``mi`` diagnostic; the option
``convention`` sets them all at once (``mirage``, the default, or ``ragen``), and an
option given beside it wins over the preset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TokenMarginal = Literal["of_sums", "of_means"]
Columns = Literal["merged", "separate"]
TrajectoryDraws = Literal["without_replacement", "with_replacement"]
EmptyColumns = Literal["keep", "drop"]
RetrievalTies = Literal["expected", "first", "topk"]
Convention = Literal["mirage", "ragen"]


@dataclass(frozen=True)
class MIConventions:
    """One setting per difference (docs/conventions.md has the table and examples).

    * ``token_marginal``: the per-token marginal of reasoning n, (1/|Z_n|) log mean_j
      exp(L[n, j]) (``of_sums``, PAPER.md section 2) or log mean_j exp(L[n, j] / |Z_n|)
      (``of_means``, the reference code's);
    * ``columns``: prompts with identical ids are one column (``merged``; chance 1/C) or
      every group (first turn) or sampled turn (trajectory) has its own column and an
      identical prompt's column counts as a hit (``separate``; chance: the mean share of
      columns identical to a reasoning's own);
    * ``trajectory_draws``: the trajectory scope draws trajectories without replacement,
      then a turn of each (``without_replacement``), or draws (trajectory, turn) pairs with
      replacement among turns with a reasoning, a draw landing on a trajectory without
      one giving nothing (``with_replacement``);
    * ``empty_columns``: a prompt whose reasonings are all empty stays a column (``keep``)
      or is left out (``drop``);
    * ``retrieval_ties``: a tie counts its chance of being won (``expected``), the column
      of lower index wins (``first``), or retrieval takes the first maximal column and
      Recall@k the order ``torch.topk`` returns over the best min(8, C) columns (``topk``,
      the reference code's ranking, whose order among ties torch does not specify);
    * ``check_at_step_zero``: the proxies also run at step 0, the starting policy (True),
      or start at step 1 (False), which moves the EMA of MI-ZScore-EMA by one check.
    """

    token_marginal: TokenMarginal = "of_sums"
    columns: Columns = "merged"
    trajectory_draws: TrajectoryDraws = "without_replacement"
    empty_columns: EmptyColumns = "keep"
    retrieval_ties: RetrievalTies = "expected"
    check_at_step_zero: bool = True


PRESETS: dict[str, MIConventions] = {
    "mirage": MIConventions(),
    "ragen": MIConventions(token_marginal="of_means", columns="separate",
                           trajectory_draws="with_replacement", empty_columns="drop",
                           retrieval_ties="topk", check_at_step_zero=False),
}

SETTINGS = tuple(MIConventions.__dataclass_fields__)


def resolve(convention: str, **given) -> MIConventions:
    """The preset ``convention`` with every setting in ``given`` that is not None put over it."""
    if convention not in PRESETS:
        raise ValueError(f"unknown MI convention {convention!r}; valid: {', '.join(PRESETS)}")
    chosen = {name: value for name, value in given.items() if value is not None}
    return MIConventions(**{**PRESETS[convention].__dict__, **chosen})

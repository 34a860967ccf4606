"""Which MI conventions a study's numbers use (docs/conventions.md), for the page to say.

Runs since #46 log MI-Est and MI-ZScore on both per-token scales: ``*_of_sums``
(PAPER.md's formula, MIRAGE's default) and ``*_of_means`` (the reference code's, the scale
of the paper's MI curves and Spearman table). Earlier runs carry the default scale only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd

from mirage.plugins.diagnostics.conventions import MIConventions
from mirage.plugins.diagnostics.mi import MIOptions
from mirage.report.results import Study

# finding 4's correlates on the reference code's per-token scale, when the runs carry it
REFERENCE_SCALE = {
    "mi/trajectory/mi_zscore_of_means": "trajectory MI-ZScore (RAGEN scale)",
    "mi/first_turn/mi_zscore_of_means": "first-turn MI-ZScore (RAGEN scale)",
    "mi/first_turn/mi_est_of_means": "first-turn MI-Est (RAGEN scale)",
}


def mi_conventions(config: dict) -> str:
    """The MI conventions a stored ``config`` ran with that differ from MIRAGE's
    defaults, as "name: value, ..."; "mirage" when none does."""
    options = config.get("diagnostics", {}).get("options", {}).get("mi", {})
    chosen = MIOptions(**{key: value for key, value in options.items()
                          if key in MIOptions.model_fields}).conventions()
    default = MIConventions()
    differs = [f"{name}: {value}" for name, value in sorted(chosen.__dict__.items())
               if value != getattr(default, name)]
    return ", ".join(differs) or "mirage"


def carries_both_scales(study: Study) -> bool:
    """Whether any of the study's runs logged the reference code's per-token scale."""
    return bool(study.metrics["name"].isin(list(REFERENCE_SCALE)).any())


def scale_statement(study: Study, configs: pd.Series, name: str, later: Sequence[str] = ()) -> str:
    """The page's line on which convention every MI number uses; ``configs``: the stored
    configs (JSON text) of the study's runs; ``later``: the experiments whose finding 4 the
    page shows again on both scales."""
    used = sorted({mi_conventions(json.loads(text)) for text in configs})
    if used == ["mirage"]:
        conventions = ("Every MI number on this page uses MIRAGE's default conventions "
                       "(docs/conventions.md): MI-Est and MI-ZScore on PAPER.md's per-token scale "
                       "(the marginal of summed log-probabilities divided by |Z|), identical prompts "
                       "merged into one column (chance 1/C), retrieval ties by expected credit, MI "
                       "checks from step 0.")
    else:
        conventions = ("The runs' MI conventions (docs/conventions.md), where they differ from "
                       "MIRAGE's defaults: " + "; ".join(used) + ".")
    reference = ("The paper's MI curves and its Spearman table (finding 4) use the reference code's "
                 "per-token scale (the marginal of per-token means), on which MI-Est is never lower.")
    if carries_both_scales(study):
        scales = ("Finding 4 shows both scales: rows marked \"RAGEN scale\" use the reference "
                  "code's (`*_of_means`), the others MIRAGE's.")
    else:
        scales = (f"The runs of `{name}` predate the logging of both scales and kept no "
                  "checkpoints to re-score, so finding 4 holds MIRAGE's (PAPER.md's) per-token "
                  "scale only. Every run made by MIRAGE since issue #46 logs both (`mi_est_of_means`, "
                  "`mi_zscore_of_means` beside `mi_est_of_sums`, `mi_zscore_of_sums`), and this page "
                  "reports finding 4 on both for a study whose runs carry them"
                  + (": " + ", ".join(f"\"Finding 4 on `{experiment}`\"" for experiment in later)
                     if later else "") + ".")
    return f"**Which convention each MI number uses.** {conventions} {reference} {scales}"

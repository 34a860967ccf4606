"""What the page's top line says of each study that provokes a regime: how the regime was
induced (read from its runs' stored configs) and whether reward variance fell without a
filter (read from its stored ``reward/*`` metrics), the precondition PAPER.md section 3
names for template collapse."""

from __future__ import annotations

import pandas as pd

from mirage.core.config.run_config import AlgorithmConfig
from mirage.report.paired import Paired, paired
from mirage.report.results import Study
from mirage.report.summary import by_seed

WINDOW = 10  # training steps averaged at the start (from step 1) and at the end of a run
ZERO_VARIANCE = "reward/zero_variance_groups"  # groups of the batch (before filtering) with equal returns
MIXED = "reward/mixed_share"
STD = "reward/std_mean"  # mean over groups of the in-group reward std


def induced_by(runs: pd.DataFrame) -> str:
    """How ``runs`` (one arm) differ from the default settings: the regulariser, its
    reference, the step size and the warm start's demonstrations."""
    run = runs.iloc[0]
    defaults = AlgorithmConfig.model_fields
    parts = []
    if run["entropy_coef"] != defaults["entropy_coef"].default:
        parts.append(f"an entropy bonus {run['entropy_coef']:g}" if run["entropy_coef"] > 0
                     else "no entropy bonus")
    if run["kl_coef"] > 0:
        if run["reference"] == "starting policy":
            towards = "the starting policy"
        else:
            towards = f"a reference fine-tuned on demonstrations with {run['reference']}"
            if "generic_share=1" in run["reference"]:  # every demonstrated reasoning generic
                towards = ("a reference fine-tuned to reason in input-agnostic boilerplate "
                           f"(demonstrations with {run['reference']}: every reasoning a generic sentence)")
        parts.append(f"a KL term {run['kl_coef']:g} towards {towards}")
    else:
        parts.append("no KL term")
    default_lr = defaults["lr"].default
    if run["lr"] != default_lr:
        parts.append(f"lr {run['lr']:g} ({run['lr'] / default_lr:g} x the default {default_lr:g})")
    else:
        parts.append(f"the default lr {run['lr']:g}")
    if run["env_options"]:
        parts.append(f"a warm start on demonstrations with {run['env_options']}")
    return ", ".join(parts) + f", {run['steps']} iterations"


def _window(study: Study, runs: pd.DataFrame, name: str, scale: pd.Series | None = None) -> pd.DataFrame:
    """Per run of ``runs``: the mean of ``name`` over its first WINDOW training steps and
    over its last WINDOW (divided by ``scale`` per run, when given)."""
    rows = study.metrics[(study.metrics["name"] == name) & study.metrics["run_id"].isin(runs["run_id"])
                         & (study.metrics["step"] >= 1)].sort_values("step")
    if rows.empty:
        return pd.DataFrame(columns=["run_id", "start", "end", "seed"])
    start = rows.groupby("run_id").head(WINDOW).groupby("run_id")["value"].mean()
    end = rows.groupby("run_id").tail(WINDOW).groupby("run_id")["value"].mean()
    frame = pd.DataFrame({"start": start, "end": end})
    if scale is not None:
        frame = frame.div(scale.reindex(frame.index), axis=0)
    return frame.reset_index(names="run_id").merge(runs[["run_id", "seed"]], on="run_id")


def reward_variance(study: Study, runs: pd.DataFrame) -> tuple[str, Paired | None]:
    """Whether reward variance fell in ``runs`` (one arm, paired by seed): the share of
    zero-variance groups, the share of mixed groups and the mean in-group reward std, over
    the first and the last WINDOW steps, and the paired change of the std (end - start)
    with its interval. Reward variance **fell** when that interval lies below 0. Returns
    the sentence and the change (None without the metrics)."""
    prompts = runs.set_index("run_id")["prompts"].astype(float)
    zero = _window(study, runs, ZERO_VARIANCE, prompts)
    mixed = _window(study, runs, MIXED)
    std = _window(study, runs, STD)
    if std.empty or len(std) < 2:
        return "", None
    change = paired(by_seed(std, "end"), by_seed(std, "start"))
    fell = change.high < 0
    verdict = ("fell" if fell else "rose" if change.low > 0 else "did not detectably fall")
    parts = [f"the mean in-group reward std went {std['start'].mean():.3f} -> {std['end'].mean():.3f} "
             f"(end - start {change.mean:+.3f} [{change.low:+.3f}, {change.high:+.3f}] over {change.n} seeds)"]
    if not zero.empty:
        parts.append(f"the zero-variance share of groups {zero['start'].mean():.2f} -> {zero['end'].mean():.2f}")
    if not mixed.empty:
        parts.append(f"the mixed share {mixed['start'].mean():.2f} -> {mixed['end'].mean():.2f}")
    return (f"reward variance {verdict} without a filter (first {WINDOW} vs last {WINDOW} iterations, "
            f"mean over seeds: " + "; ".join(parts) + ")"), change

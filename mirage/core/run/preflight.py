"""Pre-flight check: is reward-variance filtering likely to help this setting?

PAPER.md section 4's predictor is Std(RV)/Mean(RV) over one rollout batch. When RV is
spread out or bimodal (many prompts with no signal, some with a lot), the filter drops
the no-signal prompts and keeps the informative ones: it helps. When every prompt
carries about the same RV (the paper reports harm near 0.33 or lower), dropping some of
them is like dropping data at random: it costs data and buys no signal.

``CV_THRESHOLD`` = 0.5 separates the two. It sits between the paper's "hurts" level
(~0.33) and the value of RV spread evenly over [0, max] (1/sqrt(3) = 0.58); a bimodal
batch with half its prompts at zero variance scores 1.0.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.manager import Plugins, build_plugins
from mirage.core.rl.returns import variance_spread
from mirage.core.run import threads
from mirage.core.run.validate import validate_config

CV_THRESHOLD = 0.5
HELPS = "filtering likely helps"
HURTS = "filtering likely hurts (like dropping data at random)"
NO_SIGNAL = "no signal: filtering cannot help"


@dataclass
class Verdict:
    """The predictor's answer: ``likely_helps`` is None when there is nothing to rank."""

    likely_helps: bool | None
    text: str
    reason: str


def predict(variances: list[float], threshold: float = CV_THRESHOLD) -> Verdict:
    """[P] reward variances of one batch -> the pre-flight verdict (PAPER.md section 4)."""
    mean = statistics.fmean(variances)
    if mean <= 0:
        return Verdict(None, NO_SIGNAL,
                       "every prompt has zero reward variance, so no update has a task signal; "
                       "top_p without --include-zero would keep nothing (try more samples per "
                       "prompt, a stronger warm start or an easier setting)")
    cv = variance_spread(variances)
    zero = sum(v == 0 for v in variances)
    if cv > threshold:
        return Verdict(True, HELPS,
                       f"Std(RV)/Mean(RV) = {cv:.2f} > {threshold}: the signal is concentrated "
                       f"in some prompts ({zero} of {len(variances)} have none), so keeping the "
                       "high-variance ones removes mostly noise")
    return Verdict(False, HURTS,
                   f"Std(RV)/Mean(RV) = {cv:.2f} <= {threshold}: the prompts carry similar "
                   "signal, so dropping some loses data without raising the signal-to-noise "
                   "ratio (PAPER.md section 4: harmful near 0.33 or lower)")


@dataclass
class PreflightReport:
    """One rollout batch of the current policy, summarised for the filter decision."""

    env: str
    prompts: int
    group_size: int
    seed: int
    variances: list[float]
    success: float
    mean_return: float
    verdict: Verdict
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def rv_mean(self) -> float:
        return statistics.fmean(self.variances)

    @property
    def rv_std(self) -> float:
        return statistics.pstdev(self.variances)

    @property
    def rv_cv(self) -> float:
        """Std(RV)/Mean(RV), population std; NaN when every RV is 0."""
        return variance_spread(self.variances)

    @property
    def zero_variance_share(self) -> float:
        return sum(v == 0 for v in self.variances) / len(self.variances)

    def histogram(self, bins: int = 5, width: int = 24) -> list[str]:
        """Text histogram of RV per prompt: one row for RV = 0, then ``bins`` equal-width
        bins over (0, max RV]."""
        top = max(self.variances)
        rows = [("RV = 0", sum(v == 0 for v in self.variances))]
        if top > 0:
            edges = [top * k / bins for k in range(bins)] + [top]
            for low, high in zip(edges, edges[1:]):
                count = sum(low < v <= high for v in self.variances)
                rows.append((f"({low:.3g}, {high:.3g}]", count))
        most = max(count for _, count in rows) or 1
        label = max(len(name) for name, _ in rows)
        return [f"  {name:<{label}} |{'#' * round(width * count / most):<{width}}| {count}"
                for name, count in rows]

    def render(self) -> str:
        cv = "undefined (mean RV is 0)" if math.isnan(self.rv_cv) else f"{self.rv_cv:.3f}"
        zero = sum(v == 0 for v in self.variances)
        lines = [
            f"preflight: {self.env}, P = {self.prompts} prompts x G = {self.group_size} rollouts, "
            f"seed {self.seed}, current policy",
            f"success {self.success:.3f}, mean return {self.mean_return:.3f}",
            "",
            "reward variance (RV) per prompt:",
            *self.histogram(),
            "",
            f"Std(RV)/Mean(RV): {cv}  (mean RV {self.rv_mean:.4g}, std {self.rv_std:.4g})",
            f"zero-variance prompts: {self.zero_variance_share:.0%} ({zero} of {len(self.variances)})",
            f"verdict: {self.verdict.text}",
            f"reason: {self.verdict.reason}",
        ]
        return "\n".join(lines)


def run_preflight(config: RunConfig, plugins: Plugins | None = None) -> PreflightReport:
    """Validate ``config``, prepare its backend (the warm start is cached) and roll out
    one batch of P x G episodes with the current policy: the batch a run's step 0 sees."""
    from mirage.core.run.loop import cache_dir, open_session, run_step

    if config.rollout.group_size < 2:
        raise ConfigError(
            f"preflight measures reward variance, which needs group size >= 2 "
            f"(got {config.rollout.group_size})"
        )
    plugins = plugins or build_plugins()
    env_options = validate_config(config, plugins)
    threads.apply_checked(config.threads)
    session = open_session(config, plugins, env_options)
    facts = session.backend.prepare(session.env_cls, cache_dir())
    metrics, batch = run_step(session, 0)
    variances = [g.reward_variance for g in batch.groups]
    return PreflightReport(
        env=config.env.name, prompts=config.rollout.prompts, group_size=config.rollout.group_size,
        seed=config.seed, variances=variances, success=metrics["train/success"],
        mean_return=metrics["train/return"], verdict=predict(variances), facts=facts,
    )

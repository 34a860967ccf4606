"""Measure a policy without training it: the batches ``core probe`` rolls out and diagnoses.

A probe is a run's step 0 repeated: each batch is rollout -> score -> diagnose
(:func:`mirage.core.run.loop.measure_step`) with the MI proxies and the reward structure,
and nothing is updated. Batch ``b`` samples the prompts and streams a run's step ``b``
would, from the config's seed alone, so two policies probed with one seed see the same
prompts batch by batch: the batches pair them.
"""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from mirage.core.config.overrides import assign
from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.manager import Plugins, build_plugins
from mirage.core.rl.batch import Batch
from mirage.core.rl.returns import variance_spread
from mirage.core.run import threads
from mirage.core.run.loop import cache_dir, measure_step, open_session
from mirage.core.run.validate import parse_config, validate_config

DIAGNOSTICS = ["mi", "reward"]  # the MI proxies and the reward structure; nothing needs an update
DEFAULT_LABEL = "default policy"  # a probe without --model: the environment's warm start


def probe_config(data: dict[str, Any], model: str | None) -> RunConfig:
    """The config of one probe: ``data`` (from the command line) with ``model`` as
    ``model.path`` (None: the built-in policy) and the diagnostics a probe computes at
    every batch. ``steps`` keeps its meaning, iterations of training: a probe trains
    none, and its stored run says so (mirage/probe/storing.py)."""
    data = copy.deepcopy(data)
    assign(data, "model.path", model)
    assign(data, "diagnostics.names", DIAGNOSTICS)
    assign(data, "diagnostics.every", 1)
    config = parse_config(data)
    if config.rollout.group_size < 2:
        raise ConfigError(f"--group-size {config.rollout.group_size}: a probe measures reward "
                          "variance per prompt, which needs at least 2 samples per prompt")
    if config.rollout.prompts < 2:
        raise ConfigError(f"--prompts {config.rollout.prompts}: the MI proxies tell prompts "
                          "apart, which needs at least 2 prompts")
    return config


@dataclass
class Probe:
    """One policy's batches: per batch its metrics and each prompt's reward variance."""

    label: str
    config: RunConfig
    metrics: list[dict[str, float]] = field(default_factory=list)
    variances: list[list[float]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    first_batch: Batch | None = None  # its rollouts are what a stored probe shows
    run_id: str | None = None  # set once stored

    def values(self, name: str) -> list[float]:
        """``name``'s value in each batch that measured it."""
        return [m[name] for m in self.metrics if name in m]

    def mean(self, name: str) -> float:
        """Mean over the batches where ``name`` is defined (NaN: undefined in all)."""
        found = [v for v in self.values(name) if not math.isnan(v)]
        return statistics.fmean(found) if found else float("nan")

    def merged(self) -> dict[str, float]:
        """Every metric's mean over the batches (the stored run's one step)."""
        names = dict.fromkeys(name for m in self.metrics for name in m)
        return {name: self.mean(name) for name in names}


def reward_metrics(batch: Batch) -> dict[str, float]:
    """Reward variance over the batch's prompts: its mean, the share of prompts with none
    (no GRPO signal) and Std(RV)/Mean(RV), the filter predictor of ``core preflight``."""
    variances = [g.reward_variance for g in batch.groups]
    mean = statistics.fmean(variances)
    return {
        "probe/rv_mean": mean,
        "probe/rv_zero_share": sum(v == 0 for v in variances) / len(variances),
        "probe/rv_cv": variance_spread(variances),
    }


def probe_policy(config: RunConfig, batches: int, label: str, *, plugins: Plugins | None = None,
                 progress: bool = True) -> Probe:
    """Load ``config``'s policy (a checkpoint, or the warm start) and measure ``batches``
    batches of it; ConfigError for a bad config or a model that cannot be loaded."""
    if batches < 1:
        raise ConfigError(f"--batches {batches}: at least 1")
    plugins = plugins or build_plugins()
    env_options = validate_config(config, plugins)
    threads.apply_checked(config.threads)
    session = open_session(config, plugins, env_options)
    probe = Probe(label, config)
    probe.facts = session.backend.prepare(session.env_cls, cache_dir(), progress=progress)
    for index in tqdm(range(batches), desc=f"probe {label}", unit="batch", disable=not progress,
                      leave=False):
        metrics, timings, batch = measure_step(session, index)
        probe.metrics.append(metrics | timings | reward_metrics(batch))
        probe.variances.append([g.reward_variance for g in batch.groups])
        if index == 0:
            probe.first_batch = batch
    return probe

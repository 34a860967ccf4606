"""The stages of one iteration, as the run loop calls them: rollout -> score -> diagnose
-> filter -> update (the score stage is mirage/core/run/scoring.py, which an algorithm that
samples extra rounds calls too).

Each stage calls its hook through :func:`mirage.core.plugin_api.blame.call_stage`: an
exception in a plugin's code is raised again naming the plugin, file and line, and a
malformed result (mirage/core/plugin_api/results.py) stops the run naming the plugin. The
built-in ``stages`` plugin (mirage/plugins/stages.py) implements each hook by delegating
to the components the run selected.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
import torch

from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.blame import (
    PluginError, Suspect, backend_suspect, call_stage, component, component_source, hook_suspects,
)
from mirage.core.plugin_api.results import check_metrics, check_selection
from mirage.core.plugin_api.session import RunSession
from mirage.core.rl.batch import Batch, make_batch


class FilterError(PluginError):
    """A filter raised during selection; the message names it, its plugin and the file
    and line that raised."""


def batch_metrics(batch: Batch, prefix: str) -> dict[str, float]:
    turns = [turn for t in batch.trajectories for turn in t.turns]
    return {
        f"{prefix}/success": batch.success_rate(),
        f"{prefix}/return": batch.mean_return(),
        f"{prefix}/turns": len(turns) / max(len(batch.trajectories), 1),
        f"{prefix}/format_valid": sum(t.format_ok for t in turns) / max(len(turns), 1),
        f"{prefix}/response_tokens": sum(len(t.response_ids) for t in turns) / max(len(turns), 1),
    }


def validate_policy(run: RunSession) -> dict[str, float]:
    """Success on the fixed validation set at the validation temperature (and greedy)."""
    val = run.config.validation
    seeds = [val.seed + i for i in range(val.episodes)]
    metrics: dict[str, float] = {}
    modes = [("val", False)] + ([("val_greedy", True)] if val.greedy else [])
    for name, greedy in modes:
        torch.manual_seed(val.seed)
        batch = make_batch(0, seeds, 1, temperature=val.temperature, greedy=greedy,
                           sampling_seed=sampling_seed(run.config, val.seed, 0))
        rollout(run, batch, "validation")
        metrics[f"{name}/success"] = batch.success_rate()
        metrics[f"{name}/return"] = batch.mean_return()
    return metrics


def sampling_seed(config: RunConfig, *key: int) -> int | None:
    """The seed of a batch's per-trajectory sampling streams (``Batch.sampling_seed``) in a
    data-parallel run, whose samples must not depend on how many processes share the
    batch; None (the global torch generator, seeded per step) otherwise."""
    if config.model.parallel == "none":
        return None
    return int(np.random.SeedSequence([*key, 0x5EED]).generate_state(1)[0])


def rollout(run: RunSession, batch: Batch, stage: str) -> None:
    """The rollout hooks on ``batch``; an exception names the environment, backend or
    rollout plugin whose code raised it. In a data-parallel run each rank rolls out its
    share of the prompt groups and every rank then holds the whole batch."""
    def sample() -> None:
        run.backend.sync_weights()  # a separate sampler gets the weights the last update made
        if not run.world.distributed:
            run.hook.mirage_rollout(run=run, batch=batch)
            return
        mine = run.world.share(len(batch.groups))
        part = dataclasses.replace(batch, groups=batch.groups[mine.start : mine.stop])
        run.hook.mirage_rollout(run=run, batch=part)
        batch.groups = run.world.gather(part.groups)

    call_stage(run, stage, sample, lambda: [
        Suspect(component_source(run, "envs", run.config.env.name), run.env_cls.__module__),
        *hook_suspects(run, "mirage_rollout"), backend_suspect(run)])


def diagnose(run: RunSession, batch: Batch) -> dict[str, float]:
    """Every ``mirage_diagnose`` implementation's metrics, each checked and attributed to
    its plugin, then every diagnostic's ``review`` of them."""
    mark = time.perf_counter()
    merged: dict[str, float] = {}
    diagnostics = {name: component(component_source(run, "diagnostics", name), diagnostic)
                   for name, diagnostic in run.diagnostics.items()}
    impls = run.hook.mirage_diagnose.get_hookimpls()
    for impl in reversed(impls):  # pluggy's own call order
        others = [other.plugin for other in impls if other.plugin is not impl.plugin]
        only_this = run.plugins.manager.subset_hook_caller("mirage_diagnose", others)
        this = Suspect(f"mirage_diagnose of plugin {impl.plugin_name!r}", impl.function.__module__)
        for result in call_stage(run, "diagnosis", lambda: only_this(run=run, batch=batch),
                                 lambda: [*diagnostics.values(), this, backend_suspect(run)],
                                 lambda results: _check_each(results, this.source, run.step)):
            merged |= dict(result or {})
    for name, diagnostic in run.diagnostics.items():  # reviews read every diagnostic's numbers
        reviewer = diagnostics[name]
        merged |= dict(call_stage(run, "review", lambda: diagnostic.review(run, merged), lambda: [reviewer],
                                  lambda reviewed: check_metrics(reviewed, reviewer.source, run.step)) or {})
    if merged:
        merged["time/diagnose"] = time.perf_counter() - mark
    return merged


def _check_each(results: list[Any], source: str, step: int) -> None:
    for result in results:
        check_metrics(result, source, step)


def apply_filter(run: RunSession, batch: Batch) -> dict[str, float]:
    """The filter stage: select and mark the kept groups and set the update's loss scale;
    returns the filter's metrics and what the update will see. An exception in it is raised
    again as a FilterError naming the filter (or filter hook) whose code raised, its plugin,
    file and line (mirage/core/plugin_api/blame.py), and a malformed selection or metric stops
    it with a PluginResultError (the run then fails with that message; the steps already
    stored stay)."""
    chosen = component(component_source(run, "filters", run.config.filter.name), run.filter)
    selection = None
    if run.world.is_main:  # one selection, the main rank's, for every rank
        selection = call_stage(run, "selection", lambda: run.hook.mirage_filter(run=run, batch=batch),
                               lambda: [chosen, *hook_suspects(run, "mirage_filter")],
                               lambda selection: check_selection(selection, batch, chosen.source),
                               error_class=FilterError, named=chosen)
    selection = run.world.broadcast(selection)
    batch.apply(selection)
    metrics = selection.metrics | kept_metrics(batch)
    batch.loss_scale = loss_scale(metrics["filter/kept_trajectories"] / len(batch.trajectories),
                                  run.config)
    return metrics | {"filter/loss_scale": batch.loss_scale}


def kept_metrics(batch: Batch) -> dict[str, float]:
    """What the update will see, counted on the batch after the selection was applied
    (so they are right whatever metrics a third-party filter reports)."""
    kept = batch.kept_groups()
    return {
        "filter/kept_groups": float(len(kept)),
        "filter/kept_ratio": batch.kept_ratio,
        "filter/kept_trajectories": float(sum(len(g.kept_trajectories()) for g in kept)),
    }


def loss_scale(kept_share: float, config: RunConfig) -> float:
    """Advantage multiplier after filtering (PAPER.md section 6, reference code): the kept
    share of the P x G trajectories (the kept group ratio for prompt-level filters) for
    ``linear``, its square root for ``sqrt``, 1 for ``none`` (``config.loss_scaling``);
    times ``filter.rho`` with ``step_size_matching`` (PAPER.md section 4: the loss is
    scaled by rho)."""
    scale = {"none": 1.0, "linear": kept_share, "sqrt": math.sqrt(kept_share)}[config.loss_scaling]
    return scale * (config.filter.rho if config.step_size_matching else 1.0)


def update(run: RunSession, batch: Batch, kept_trajectories: float) -> dict[str, float]:
    """The update stage's metrics. A step that kept nothing has nothing to train on: it
    adds one to the empty steps in a row (``filter/empty_streak``), which the stop rule reads."""
    updated: dict[str, float] = {}
    if kept_trajectories > 0:
        algorithm = component(component_source(run, "algorithms", run.config.algorithm.name), run.algorithm)
        updated = dict(call_stage(
            run, "the update", lambda: run.hook.mirage_update(run=run, batch=batch),
            lambda: [algorithm, *hook_suspects(run, "mirage_update"), backend_suspect(run)],
            lambda metrics: check_metrics(metrics, algorithm.source, run.step)) or {})
        run.state["empty_streak"] = 0
    else:
        run.state["empty_streak"] = run.state.get("empty_streak", 0) + 1
    return updated | {"filter/empty_streak": float(run.state["empty_streak"])}


def backend_metrics(run: RunSession, step: int) -> dict[str, float]:
    """What the backend measured during the step (``Backend.step_metrics``), drained once
    the step's last generation (validation) is done."""
    measured = run.backend.step_metrics()
    check_metrics(measured, component_source(run, "backends", run.config.model.backend), step)
    return dict(measured or {})

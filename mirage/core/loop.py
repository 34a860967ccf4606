"""The run loop: rollout -> score -> diagnose -> filter -> update -> store, every iteration.

Step 0 evaluates the starting policy (validation and diagnostics, no update). Each step
is written to the store as it finishes; checkpoints and resumes are
mirage/core/checkpoints.py's.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from mirage.core import threads
from mirage.core.batch import Batch, Selection, make_batch
from mirage.core.checkpoints import (
    checkpoint_due, checkpoint_root, plan_resume, restore_checkpoint, save_checkpoint,
)
from mirage.core.config import FilterConfig, RunConfig
from mirage.core.heartbeat import Heartbeat, this_process
from mirage.core.plugin_errors import (
    EVENT_KIND, PluginError, Suspect, backend_suspect, blamed, component, component_source, hook_suspects,
)
from mirage.core.plugin_failures import EVENT_KIND as SET_ASIDE_EVENT
from mirage.core.plugin_results import check_metrics, check_selection
from mirage.core.plugins import Plugins, build_plugins
from mirage.core.progress import Progress
from mirage.core.run_hooks import RunHooks
from mirage.core.run_records import environment_record
from mirage.core.scoring import score_batch
from mirage.core.session import RunSession
from mirage.core.store import GroupRow, RolloutRow, RunStore, new_run_id, stored_values
from mirage.core.validate import logger_options, validate_config


class RunStopped(RuntimeError):
    """The run stopped itself (status ``stopped``, an event says why)."""


class EmptyStepsError(RunStopped):
    """The filter kept nothing for too many steps in a row."""


class CollapseAlarmStop(RunStopped):
    """The collapse alarm fired and ``diagnostics.alarm.stop`` is on."""


class FilterError(PluginError):
    """A filter raised during selection; the message names it, its plugin and the file
    and line that raised."""


def cache_dir() -> Path:
    return Path(os.environ.get("MIRAGE_CACHE", Path.home() / ".cache" / "mirage"))


def step_seeds(seed: int, step: int, count: int) -> list[int]:
    """Prompt seeds of one training step, independent of every other step."""
    return [int(s) for s in np.random.SeedSequence([seed, step]).generate_state(count)]


def open_session(config: RunConfig, plugins: Plugins, env_options: Any) -> RunSession:
    reg = plugins.registries
    return RunSession(
        config=config,
        plugins=plugins,
        env_cls=reg.envs.get(config.env.name),
        env_options=env_options,
        backend=reg.backends.get(config.model.backend)(config),
        algorithm=reg.algorithms.get(config.algorithm.name)(config),
        filter=reg.filters.get(config.filter.name)(config.filter),
        diagnostics={n: reg.diagnostics.get(n)(config) for n in config.diagnostics.names},
        loggers={n: reg.loggers.get(n)(logger_options(config, plugins, n))
                 for n in config.loggers.names},
    )


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
        batch = make_batch(0, seeds, 1, temperature=val.temperature, greedy=greedy)
        rollout(run, batch, "validation")
        metrics[f"{name}/success"] = batch.success_rate()
        metrics[f"{name}/return"] = batch.mean_return()
    return metrics


def run_step(run: RunSession, step: int) -> tuple[dict[str, float], Batch]:
    """One iteration; returns its metrics and the batch."""
    cfg = run.config
    run.step = step
    torch.manual_seed(int(np.random.SeedSequence([cfg.seed, step, 1]).generate_state(1)[0]))
    timings: dict[str, float] = {}
    started = time.perf_counter()
    batch = make_batch(step, step_seeds(cfg.seed, step, cfg.rollout.prompts), cfg.rollout.group_size,
                       temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                       min_p=cfg.rollout.min_p)
    rollout(run, batch, "rollout")
    timings["time/rollout"] = time.perf_counter() - started
    mark = time.perf_counter()
    score_batch(run, batch)
    timings["time/score"] = time.perf_counter() - mark
    metrics = batch_metrics(batch, "train")
    # Diagnostics see the whole batch under the policy that sampled it (PAPER.md section 6).
    metrics |= diagnose(run, batch) if step else _step0_diagnostics(run, batch)
    if step == 0:
        return metrics | timings, batch
    mark = time.perf_counter()
    selection = apply_filter(run, batch)
    timings["time/filter"] = time.perf_counter() - mark
    metrics |= selection.metrics | kept_metrics(batch)
    batch.loss_scale = loss_scale(metrics["filter/kept_trajectories"] / len(batch.trajectories),
                                  cfg.filter)
    metrics["filter/loss_scale"] = batch.loss_scale
    mark = time.perf_counter()
    if metrics["filter/kept_trajectories"] > 0:  # else an empty step: nothing to train on
        algorithm = component(component_source(run, "algorithms", cfg.algorithm.name), run.algorithm)
        with blamed("the update", step, lambda: [algorithm, *hook_suspects(run, "mirage_update"),
                                                 backend_suspect(run)]):
            updated = run.hook.mirage_update(run=run, batch=batch)
        check_metrics(updated, algorithm.source, step)
        metrics |= dict(updated or {})
        run.state["empty_streak"] = 0
    else:
        run.state["empty_streak"] = run.state.get("empty_streak", 0) + 1
    metrics["filter/empty_streak"] = float(run.state.get("empty_streak", 0))
    timings["time/update"] = time.perf_counter() - mark
    timings["time/step"] = time.perf_counter() - started
    return metrics | timings, batch


def apply_filter(run: RunSession, batch: Batch) -> Selection:
    """The filter stage: select and mark the kept groups. An exception in it is raised
    again as a FilterError naming the filter (or filter hook) whose code raised, its plugin,
    file and line (mirage/core/plugin_errors.py), and a
    malformed selection or metric stops it with a PluginResultError (the run then fails
    with that message; the steps already stored stay)."""
    chosen = component(component_source(run, "filters", run.config.filter.name), run.filter)
    with blamed("selection", batch.step, lambda: [chosen, *hook_suspects(run, "mirage_filter")],
                error_class=FilterError, named=chosen):
        selection = run.hook.mirage_filter(run=run, batch=batch)
    check_selection(selection, batch, chosen.source)
    batch.apply(selection)
    return selection


def diagnostic_source(run: RunSession, name: str) -> str:
    return component_source(run, "diagnostics", name)


def rollout(run: RunSession, batch: Batch, stage: str) -> None:
    """The rollout hooks on ``batch``; an exception names the environment, backend or
    rollout plugin whose code raised it."""
    def suspects() -> list[Suspect]:
        env = Suspect(component_source(run, "envs", run.config.env.name), run.env_cls.__module__)
        return [env, *hook_suspects(run, "mirage_rollout"), backend_suspect(run)]

    with blamed(stage, run.step, suspects):
        run.backend.sync_weights()  # a separate sampler gets the weights the last update made
        run.hook.mirage_rollout(run=run, batch=batch)


def backend_metrics(run: RunSession, step: int) -> dict[str, float]:
    """What the backend measured during the step (``Backend.step_metrics``), drained once
    the step's last generation (validation) is done."""
    measured = run.backend.step_metrics()
    check_metrics(measured, component_source(run, "backends", run.config.model.backend), step)
    return dict(measured or {})


def kept_metrics(batch: Batch) -> dict[str, float]:
    """What the update will see, counted on the batch after the selection was applied
    (so they are right whatever metrics a third-party filter reports)."""
    kept = batch.kept_groups()
    return {
        "filter/kept_groups": float(len(kept)),
        "filter/kept_ratio": batch.kept_ratio,
        "filter/kept_trajectories": float(sum(len(g.kept_trajectories()) for g in kept)),
    }


def loss_scale(kept_share: float, config: FilterConfig) -> float:
    """Advantage multiplier after filtering (PAPER.md section 6, reference code): the kept
    share of the P x G trajectories (the kept group ratio for prompt-level filters) for
    ``linear``, its square root for ``sqrt``, 1 for ``none``; times rho with
    ``step_size_matching`` (PAPER.md section 4: the loss is scaled by rho)."""
    scale = {"none": 1.0, "linear": kept_share, "sqrt": math.sqrt(kept_share)}[config.loss_scaling]
    return scale * (config.rho if config.step_size_matching else 1.0)


def diagnose(run: RunSession, batch: Batch) -> dict[str, float]:
    """Every ``mirage_diagnose`` implementation's metrics, each checked and attributed to
    its plugin, then every diagnostic's ``review`` of them."""
    mark = time.perf_counter()
    merged: dict[str, float] = {}
    impls = run.hook.mirage_diagnose.get_hookimpls()
    for impl in reversed(impls):  # pluggy's own call order
        others = [other.plugin for other in impls if other.plugin is not impl.plugin]
        only_this = run.plugins.manager.subset_hook_caller("mirage_diagnose", others)
        with blamed("diagnosis", batch.step, lambda: diagnose_suspects(run, impl)):
            results = only_this(run=run, batch=batch)
        for result in results:
            check_metrics(result, f"mirage_diagnose of plugin {impl.plugin_name!r}", batch.step)
            merged |= dict(result or {})
    for name, diagnostic in run.diagnostics.items():  # reviews read every diagnostic's numbers
        source = diagnostic_source(run, name)
        with blamed("review", batch.step, lambda: [component(source, diagnostic)]):
            reviewed = diagnostic.review(run, merged)
        check_metrics(reviewed, source, batch.step)
        merged |= dict(reviewed or {})
    if merged:
        merged["time/diagnose"] = time.perf_counter() - mark
    return merged


def diagnose_suspects(run: RunSession, impl: Any) -> list[Suspect]:
    """The diagnostics, the ``mirage_diagnose`` implementation ``impl`` and the backend."""
    diagnostics = [component(diagnostic_source(run, name), diagnostic)
                   for name, diagnostic in run.diagnostics.items()]
    this = Suspect(f"mirage_diagnose of plugin {impl.plugin_name!r}", impl.function.__module__)
    return [*diagnostics, this, backend_suspect(run)]


def group_rows(batch: Batch) -> list[GroupRow]:
    return [
        GroupRow(g.prompt_index, g.seed, g.reward_mean, g.reward_variance, g.reward_std, g.kept)
        for g in batch.groups
    ]


def rollout_rows(batch: Batch, count: int) -> list[RolloutRow]:
    """Every turn of ``count`` trajectories, one per prompt in turn (sample 0 of each
    prompt, then sample 1, ...), so the rollout browser shows different prompts side by side."""
    ordered = sorted(batch.trajectories, key=lambda t: (t.sample_index, t.prompt_index))
    return [
        RolloutRow(t.prompt_index, t.sample_index, index, turn.context, turn.reasoning,
                   turn.answer, turn.reward)
        for t in ordered[:count]
        for index, turn in enumerate(t.turns)
    ]


def execute(
    config: RunConfig | None,
    db: Path,
    *,
    resume: str | None = None,
    plugins: Plugins | None = None,
    progress: bool = True,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    experiment: str | None = None,
    cell: str | None = None,
    extend_to: int | None = None,
    name: str | None = None,
    tags: tuple[str, ...] = (),
    note: str | None = None,
) -> str:
    """Validate, then run (or resume) a whole run; return its id. ``experiment`` and
    ``cell`` label a run of a registry grid (a sweep) in the ``runs`` table; ``name``,
    ``tags`` and ``note`` are the researcher's labels. A resume follows
    :func:`mirage.core.checkpoints.plan_resume`'s rules; ``extend_to`` raises a resumed run's steps. While the run
    works, a :class:`Heartbeat` tells readers that its process is alive."""
    plugins = plugins or build_plugins()
    resume_from = 0
    if resume:
        config, resume_from = plan_resume(Path(db), resume, extend_to)
    assert config is not None
    env_options = validate_config(config, plugins)
    chosen = threads.apply_checked(config.threads)
    store = RunStore(db)  # only after validation: a rejected run writes nothing
    run_id = resume or new_run_id()
    session = open_session(config, plugins, env_options)
    facts = session.backend.prepare(session.env_cls, cache_dir(), progress=progress)
    facts |= {"threads": chosen.count, "threads_reason": chosen.reason}
    record = environment_record({"count": chosen.count, "reason": chosen.reason})
    root = checkpoint_root(store, run_id)
    start = 0
    if resume:
        start = restore_checkpoint(session, root, resume_from)
        extended = config.model_dump(mode="json") if extend_to is not None else None
        store.resume_run(run_id, start, f"resumed from checkpoint at step {start}"
                         + (f", extended to {config.steps} steps" if extended else ""), extended,
                         process=this_process())
        store.update_run(run_id, environment=record)  # the code and machine that continue it
    else:
        store.create_run(run_id, config.model_dump(mode="json"), plugins.records(),
                         record["git"]["commit"], experiment=experiment, cell=cell,
                         seed=config.seed, name=name, tags=tags, note=note, environment=record,
                         process=this_process())
        store.record_event(run_id, 0, "backend", json.dumps(facts, default=str))
        env_facts = session.env_cls.run_facts(env_options)
        store.record_event(run_id, 0, "environment", json.dumps(
            {"name": session.env_cls.name, "version": session.env_cls.version,
             "options": env_options.model_dump(mode="json"), **env_facts}, default=str))
    for failure in plugins.failed:  # the run goes on without it, and says so
        store.record_event(run_id, start, SET_ASIDE_EVENT, failure.line())
    unsafe = session.env_cls.unsafe_warning(env_options)
    if unsafe:  # recorded on every start, resumes included, and never out of sight
        store.record_event(run_id, start, "unsafe", unsafe)
    bar = Progress(total=config.steps, initial=start, enabled=progress, run_id=run_id, unsafe=unsafe)
    with Heartbeat(store, run_id):
        _train(session, store, run_id, start, root, bar, on_step)
    return run_id


def _train(session: RunSession, store: RunStore, run_id: str, start: int, root: Path,
           bar: Progress, on_step: Callable[[int, dict[str, float]], None] | None) -> None:
    """Steps ``start`` (or the one after a resumed checkpoint) to ``config.steps``; a
    stop, an interrupt or an error sets the run's status before it is raised again, and
    the run hooks (loggers) hear of the start, every stored step and the end."""
    config = session.config
    hooks = RunHooks(session, run_id)
    hooks.start(store.path.parent, start if start == 0 else start + 1)
    _record_notices(session, store, run_id, start, bar)
    status, reason = "finished", None
    try:
        for step in range(start if start == 0 else start + 1, config.steps + 1):
            metrics, batch = run_step(session, step)
            if step == 0 or step % config.validation.every == 0 or step == config.steps:
                metrics |= validate_policy(session)
            metrics |= backend_metrics(session, step)
            store.record_step(run_id, step, metrics, group_rows(batch),
                              rollout_rows(batch, config.rollout.stored_trajectories))
            hooks.step_end(step, stored_values(metrics))  # loggers see what the store has
            if checkpoint_due(config, step):
                save_checkpoint(session, root, step)
            bar.update(step, metrics)
            _record_notices(session, store, run_id, step, bar)
            if on_step:
                on_step(step, metrics)
            if metrics.get("alarm/collapse") == 1.0 and config.diagnostics.alarm.stop:
                message = "the collapse alarm fired (diagnostics.alarm.stop is on)"
                store.record_event(run_id, step, "stopped", message)
                store.set_status(run_id, "stopped", message)
                raise CollapseAlarmStop(f"run {run_id}: {message}")
            if session.state.get("empty_streak", 0) >= config.filter.max_empty_steps:
                message = (f"filter {config.filter.name!r} kept no group for "
                           f"{config.filter.max_empty_steps} steps in a row")
                store.record_event(run_id, step, "stopped", message)
                store.set_status(run_id, "stopped", message)
                raise EmptyStepsError(f"run {run_id}: {message}")
    except RunStopped as stop:
        status, reason = "stopped", str(stop)
        raise
    except KeyboardInterrupt:
        status, reason = "stopped", "interrupted"
        store.set_status(run_id, status, reason)
        raise
    except BaseException as error:
        status, reason = "failed", f"{type(error).__name__}: {error}"
        if isinstance(error, PluginError):  # the one line names the place; the event keeps all
            store.record_event(run_id, session.step, EVENT_KIND, f"{error}\n\n{error.traceback}")
        store.set_status(run_id, status, reason)
        raise
    else:
        store.set_status(run_id, "finished")
    finally:
        hooks.end(status, reason)
        _record_notices(session, store, run_id, session.step, bar)
        bar.close()


def _record_notices(session: RunSession, store: RunStore, run_id: str, step: int,
                    bar: Progress) -> None:
    """Write the notices the stages and run hooks raised to the store's events and show them."""
    for kind, message in session.notices:
        store.record_event(run_id, step, kind, message)
        bar.warn(message)
    session.notices.clear()


def _step0_diagnostics(run: RunSession, batch: Batch) -> dict[str, float]:
    run.step = 1  # diagnostics due at step 1 also describe the starting policy
    try:
        return diagnose(run, batch)
    finally:
        run.step = 0

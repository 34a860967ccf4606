"""The run loop: rollout -> score -> diagnose -> filter -> update -> store, every iteration.

Step 0 evaluates the starting policy (validation and diagnostics, no update). Each step
is written to the store as it finishes; checkpoints and resumes are
mirage/core/run/checkpoints.py's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from mirage.core.config.run_config import RunConfig
from mirage.core.parallel.world import World
from mirage.core.plugin_api.blame import EVENT_KIND, PluginError
from mirage.core.plugin_api.failures import EVENT_KIND as SET_ASIDE_EVENT
from mirage.core.plugin_api.manager import Plugins, build_plugins
from mirage.core.plugin_api.session import RunSession
from mirage.core.rl.batch import Batch, make_batch
from mirage.core.run import threads
from mirage.core.run.checkpoints import (
    checkpoint_due, checkpoint_root, plan_resume, restore_checkpoint, save_checkpoint,
)
from mirage.core.run.ranks import prepare_policy
from mirage.core.run.progress import Progress
from mirage.core.run.records import environment_record
from mirage.core.run.run_hooks import RunHooks
from mirage.core.run.scoring import score_batch
from mirage.core.run.stages import (
    apply_filter, backend_metrics, batch_metrics, diagnose, rollout, sampling_seed, update, validate_policy,
)
from mirage.core.run.validate import build_component, validate_config
from mirage.core.store.heartbeat import Heartbeat, this_process
from mirage.core.store.run_store import GroupRow, RolloutRow, RunStore, new_run_id, stored_values


class RunStopped(RuntimeError):
    """The run stopped itself (status ``stopped``, an event says why)."""


class EmptyStepsError(RunStopped):
    """The filter kept nothing for too many steps in a row."""


class CollapseAlarmStop(RunStopped):
    """The collapse alarm fired and ``diagnostics.alarm.stop`` is on."""


def cache_dir() -> Path:
    return Path(os.environ.get("MIRAGE_CACHE", Path.home() / ".cache" / "mirage"))


def step_seeds(seed: int, step: int, count: int) -> list[int]:
    """Prompt seeds of one training step, independent of every other step."""
    return [int(s) for s in np.random.SeedSequence([seed, step]).generate_state(count)]


def build_components(config: RunConfig, plugins: Plugins) -> dict[str, Any]:
    """The components the run selected, each built as ``cls(config, options)``."""
    def build(kind: str, name: str) -> Any:
        return build_component(config, plugins.registries, kind, name)

    return {
        "backend": build("backend", config.model.backend),
        "algorithm": build("algorithm", config.algorithm.name),
        "filter": build("filter", config.filter.name),
        "diagnostics": {n: build("diagnostic", n) for n in config.diagnostics.names},
        "loggers": {n: build("logger", n) for n in config.loggers.names},
    }


def open_session(config: RunConfig, plugins: Plugins, env_options: Any, world: World | None = None) -> RunSession:
    """The run's session: its config, plugins, environment class and components; in a
    data-parallel run, this process's place among the ranks (the backend's too)."""
    session = RunSession(config=config, plugins=plugins, env_cls=plugins.registries.envs.get(config.env.name),
                         env_options=env_options, world=world or World(), **build_components(config, plugins))
    session.backend.world = session.world
    return session


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Add the block's wall time to ``timings`` as ``time/NAME``."""
    mark = time.perf_counter()
    yield
    timings[f"time/{name}"] = time.perf_counter() - mark


def measure_step(run: RunSession, step: int) -> tuple[dict[str, float], dict[str, float], Batch]:
    """Rollout -> score -> diagnose of step ``step``'s batch (its prompts and sampling
    seeded from the run seed and the step alone); returns the metrics, the stages' times
    and the batch. The policy is left as it was: step 0 of a run, and every batch of
    ``core probe``, is this alone."""
    cfg = run.config
    run.step = step
    run.world.drain_communication()  # what the step itself exchanges is counted by the caller
    torch.manual_seed(int(np.random.SeedSequence([cfg.seed, step, 1]).generate_state(1)[0]))
    timings: dict[str, float] = {}
    with timed(timings, "rollout"):
        batch = make_batch(step, step_seeds(cfg.seed, step, cfg.rollout.prompts), cfg.rollout.group_size,
                           temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                           min_p=cfg.rollout.min_p, sampling_seed=sampling_seed(cfg, cfg.seed, step))
        rollout(run, batch, "rollout")
    with timed(timings, "score"):
        score_batch(run, batch)
    # Diagnostics see the whole batch under the policy that sampled it (PAPER.md section 6).
    return batch_metrics(batch, "train") | diagnose(run, batch), timings, batch


def run_step(run: RunSession, step: int) -> tuple[dict[str, float], Batch]:
    """One iteration: rollout -> score -> diagnose -> filter -> update; returns the step's
    metrics (each stage's time among them) and its batch. Step 0 measures the starting
    policy: it ends after diagnose."""
    started = time.perf_counter()
    metrics, timings, batch = measure_step(run, step)
    if step == 0:
        return metrics | timings | _communication(run), batch
    with timed(timings, "filter"):
        metrics |= apply_filter(run, batch)
    with timed(timings, "update"):
        metrics |= update(run, batch, metrics["filter/kept_trajectories"])
    timings["time/step"] = time.perf_counter() - started
    return metrics | timings | _communication(run), batch


def _communication(run: RunSession) -> dict[str, float]:
    """``time/communication``: the step's seconds in collectives (data-parallel runs)."""
    return {"time/communication": run.world.drain_communication()} if run.world.distributed else {}


def group_rows(batch: Batch) -> list[GroupRow]:
    return [
        GroupRow(g.prompt_index, g.seed, g.reward_mean, g.reward_variance, g.reward_std, g.kept)
        for g in batch.groups
    ]


def rollout_rows(batch: Batch, count: int) -> list[RolloutRow]:
    """Every turn of ``count`` trajectories, one per prompt in turn (sample 0 of each
    prompt, then sample 1, ...), so the rollout browser shows different prompts side by side.
    A turn in image mode keeps the pictures its prompt showed (PNG bytes)."""
    ordered = sorted(batch.trajectories, key=lambda t: (t.sample_index, t.prompt_index))
    return [
        RolloutRow(t.prompt_index, t.sample_index, index, turn.context, turn.reasoning,
                   turn.answer, turn.reward, tuple(image.png for image in turn.images))
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
    world: World | None = None,
    run_id: str | None = None,
) -> str:
    """Validate, then run (or resume) a whole run; return its id. ``experiment`` and
    ``cell`` label a run of a registry grid (a sweep) in the ``runs`` table; ``name``,
    ``tags`` and ``note`` are the researcher's labels. A resume follows
    :func:`mirage.core.run.checkpoints.plan_resume`'s rules; ``extend_to`` raises a resumed
    run's steps. While the run works, a :class:`Heartbeat` tells readers that its process
    is alive.

    In a data-parallel run every rank calls this with its ``world`` and the ``run_id`` the
    launcher chose (mirage/core/run/launch.py); only the main rank writes the store, the
    checkpoints, the loggers and the progress bar."""
    world = world or World()
    plugins = plugins or build_plugins()
    resume_from = 0
    if resume:  # planned once, by the main rank: it is the one that rewrites the run's row
        config, resume_from = world.broadcast(plan_resume(Path(db), resume, extend_to) if world.is_main else None)
    assert config is not None
    env_options = validate_config(config, plugins)
    chosen = threads.apply_checked(config.threads)
    store = RunStore(db) if world.is_main else None  # only after validation: a rejected run writes nothing
    run_id = resume or run_id or new_run_id()
    session = open_session(config, plugins, env_options, world)
    facts = prepare_policy(session, cache_dir(), progress=progress)
    facts |= {"threads": chosen.count, "threads_reason": chosen.reason}
    if world.distributed:
        facts |= {"world_size": world.size}
    root = checkpoint_root(Path(db), run_id)
    start = restore_checkpoint(session, root, resume_from) if resume else 0
    ranks = world.gather_ranks() if world.distributed else None  # every rank takes part
    if store is None:
        _train(session, None, run_id, start, root, None, None)
        return run_id
    record = environment_record({"count": chosen.count, "reason": chosen.reason})
    if resume:
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
    if ranks:  # which rank is which process on which machine (to find, or stop, them)
        store.record_event(run_id, start, "ranks", json.dumps(ranks))
    for failure in plugins.failed:  # the run goes on without it, and says so
        store.record_event(run_id, start, SET_ASIDE_EVENT, failure.line())
    unsafe = session.env_cls.unsafe_warning(env_options)
    if unsafe:  # recorded on every start, resumes included, and never out of sight
        store.record_event(run_id, start, "unsafe", unsafe)
    bar = Progress(total=config.steps, initial=start, enabled=progress, run_id=run_id, unsafe=unsafe)
    with Heartbeat(store, run_id):
        _train(session, store, run_id, start, root, bar, on_step)
    return run_id


def _train(session: RunSession, store: RunStore | None, run_id: str, start: int, root: Path,
           bar: Progress | None, on_step: Callable[[int, dict[str, float]], None] | None) -> None:
    """The steps after ``start`` (a resumed run's checkpoint; a new run, or one resumed
    without a checkpoint, runs from step 0) to ``config.steps``; a stop, an interrupt or
    an error sets the run's status before it is raised again, and the run hooks (loggers)
    hear of the start, every stored step and the end. Without a ``store`` (the other ranks
    of a data-parallel run) the steps are computed and nothing is recorded."""
    config = session.config
    first = start + 1 if start else 0
    if store is None:
        for step in range(first, config.steps + 1):
            metrics, _ = _full_step(session, step)
            session.notices.clear()
            if checkpoint_due(config, step):  # the main rank saves; the backend may need every rank
                session.backend.gather_for_save()
            if stop := stop_rule(session, metrics):
                raise stop[0](f"run {run_id}: {stop[1]}")
        return
    assert bar is not None
    hooks = RunHooks(session, run_id)
    hooks.start(store.path.parent, first)
    _record_notices(session, store, run_id, start, bar)
    status, reason = "finished", None
    try:
        for step in range(first, config.steps + 1):
            metrics, batch = _full_step(session, step)
            store.record_step(run_id, step, metrics, group_rows(batch),
                              rollout_rows(batch, config.rollout.stored_trajectories))
            hooks.step_end(step, stored_values(metrics))  # loggers see what the store has
            if checkpoint_due(config, step):
                session.backend.gather_for_save()
                save_checkpoint(session, root, step)
            bar.update(step, metrics)
            _record_notices(session, store, run_id, step, bar)
            if on_step:
                on_step(step, metrics)
            if stop := stop_rule(session, metrics):
                error, message = stop
                store.record_event(run_id, step, "stopped", message)
                store.set_status(run_id, "stopped", message)
                raise error(f"run {run_id}: {message}")
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


def _full_step(session: RunSession, step: int) -> tuple[dict[str, float], Batch]:
    """A step with its validation (when due) and the backend's own metrics."""
    config = session.config
    metrics, batch = run_step(session, step)
    if step == 0 or step % config.validation.every == 0 or step == config.steps:
        metrics |= validate_policy(session)
    metrics |= backend_metrics(session, step)
    return metrics, batch


def stop_rule(run: RunSession, metrics: dict[str, float]) -> tuple[type[RunStopped], str] | None:
    """Whether the run stops itself after a step, and why: the collapse alarm fired (and
    ``diagnostics.alarm.stop`` is on), or the filter kept nothing ``max_empty_steps`` times
    in a row."""
    config = run.config
    if metrics.get("alarm/collapse") == 1.0 and config.diagnostics.alarm.stop:
        return CollapseAlarmStop, "the collapse alarm fired (diagnostics.alarm.stop is on)"
    if run.state.get("empty_streak", 0) >= config.max_empty_steps:
        return EmptyStepsError, (f"filter {config.filter.name!r} kept no group for "
                                 f"{config.max_empty_steps} steps in a row")
    return None


def _record_notices(session: RunSession, store: RunStore, run_id: str, step: int,
                    bar: Progress) -> None:
    """Write the notices the stages and run hooks raised to the store's events and show them."""
    for kind, message in session.notices:
        store.record_event(run_id, step, kind, message)
        bar.warn(message)
    session.notices.clear()

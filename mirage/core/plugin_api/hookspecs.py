"""Hook specifications of MIRAGE, in run order.

Four kinds of hooks:

* **registration hooks** (``mirage_register_*``) are called once when the plugin
  manager is built, through pluggy (in its order; a wrapper wraps the others); a plugin
  calls ``register(name, component)`` for each named component it provides. The CLI,
  ``registry.yaml`` and the app refer to components by these names.
* the **command hook** (``mirage_register_commands``) is called once by the ``core``
  program as it starts: a plugin adds its own commands to the typer app. The commands
  of flows, report and app come this way (see :mod:`mirage.builtins`).
* **run hooks** (``mirage_run_start``, ``mirage_step_end``, ``mirage_run_end``) tell
  observers (experiment trackers, see docs/loggers.md) what the store recorded: the
  built-in ``loggers`` plugin implements them by delegating to the logger components the
  run selected. An implementation that raises is reported once as a ``logger`` event in
  the store and skipped for the rest of the run; the run goes on.
* **stage hooks** are called by the run loop every iteration, in the order
  rollout -> score -> diagnose -> filter -> update (diagnostics see each batch as it
  was sampled, before filtering, under the policy that sampled it). The built-in
  ``stages`` plugin implements each by delegating to the components the run selected; a plugin may
  replace a stage with ``@hookimpl(tryfirst=True)`` (its non-None result wins) or, for
  ``mirage_diagnose``, add metrics alongside the built-ins.

Every stage hook receives ``run``, the :class:`mirage.core.plugin_api.session.RunSession` holding
the config, the selected components and the step counter.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pluggy

if TYPE_CHECKING:
    import typer

    from mirage.core.plugin_api.session import RunSession
    from mirage.core.rl.backend import CrossScores
    from mirage.core.rl.batch import Batch, Selection

PROJECT = "mirage"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[[str, Any], None]


# --------------------------------------------------------------------------- registration


@hookspec
def mirage_register_envs(register: Register) -> None:
    """Register environment classes: ``register("sokoban", Sokoban)``.

    Receives the registry's ``register(name, cls)``; returns nothing.
    Every implementation is called (not firstresult), once per plugin manager.
    ``cls`` subclasses :class:`mirage.plugin.Environment`.
    """


@hookspec
def mirage_register_backends(register: Register) -> None:
    """Register policy backends: ``register("local", LocalBackend)``.

    ``cls(config: RunConfig, options)`` must subclass :class:`mirage.plugin.Backend`;
    ``options`` is an instance of ``cls.Options`` built from ``model.options``.
    Every implementation is called (not firstresult), once per plugin manager.
    """


@hookspec
def mirage_register_algorithms(register: Register) -> None:
    """Register update algorithms: ``register("grpo", GRPO)``.

    ``cls(config: RunConfig, options)`` must subclass :class:`mirage.plugin.Algorithm`;
    ``options`` is an instance of ``cls.Options`` built from ``algorithm.options``.
    Every implementation is called (not firstresult), once per plugin manager.
    """


@hookspec
def mirage_register_estimators(register: Register) -> None:
    """Register advantage estimators: ``register("gae", GAE)``; ``algorithm.adv_estimator``
    names one.

    ``cls(config: RunConfig)`` must subclass :class:`mirage.plugin.AdvantageEstimator`.
    Every implementation is called (not firstresult), once per plugin manager.
    """


@hookspec
def mirage_register_filters(register: Register) -> None:
    """Register rollout filters: ``register("top_p", TopPFilter)``.

    ``cls(config: RunConfig, options)`` must subclass :class:`mirage.plugin.Filter`;
    ``options`` is an instance of ``cls.Options`` built from ``filter.options``.
    Every implementation is called (not firstresult), once per plugin manager.
    """


@hookspec
def mirage_register_diagnostics(register: Register) -> None:
    """Register diagnostics: ``register("mi", MutualInformation)``.

    ``cls(config: RunConfig, options)`` must subclass :class:`mirage.plugin.Diagnostic`;
    ``options`` is an instance of ``cls.Options`` built from ``diagnostics.options[name]``.
    Every implementation is called (not firstresult), once per plugin manager.
    """


@hookspec
def mirage_register_loggers(register: Register) -> None:
    """Register experiment-tracker loggers: ``register("wandb", WandbLogger)``.

    ``cls(config: RunConfig, options)`` must subclass :class:`mirage.plugin.Logger`;
    ``options`` is an instance of ``cls.Options`` built from ``loggers.options[name]``.
    Every implementation is called (not firstresult), once per plugin manager.
    """


# --------------------------------------------------------------------------- commands


@hookspec
def mirage_register_commands(cli: typer.Typer) -> None:
    """Add commands to the ``core`` program: ``cli.command()(sweep)``.

    Receives the typer app holding core's own commands; returns nothing.
    Every implementation is called (not firstresult), in pluggy's order (a wrapper wraps
    the others), once when the ``core`` program starts (not when a run builds its
    plugins). A command name already taken sets a third-party plugin aside; between
    built-ins it fails the program naming both plugins. Bad input to a command should fail
    with the one-line error, ``mirage.core.cli.common.fail`` (exit 2).
    """


# --------------------------------------------------------------------------- run start


@hookspec
def mirage_run_start(run: RunSession, run_id: str, store_dir: Path, first_step: int) -> None:
    """A run starts (``first_step`` 0) or resumes (the first step it will record next).

    Receives the session (``run.config`` is the resolved config), the run's id and the
    folder of its run store (where loggers keep their files by default); returns
    nothing. Every implementation is called (not firstresult), once per start, after
    the run is in the store and before its first step.
    """


# --------------------------------------------------------------------------- rollout


@hookspec(firstresult=True)
def mirage_rollout(run: RunSession, batch: Batch) -> Batch | None:
    """Play every episode of ``batch`` (P prompts x G samples) to the end.

    Receives a batch whose groups carry their seeds and empty trajectories; returns the
    same batch with trajectories filled (turns, rewards, token ids). First non-None
    result wins. Called once per iteration, and for validation. In a data-parallel run
    each process receives its share of the groups (``batch.sampling_seed`` set: sample
    each turn with ``seeds=[batch.row_seed(trajectory, turn)]`` so the run does not
    depend on the share; docs/scaling.md).
    """


# --------------------------------------------------------------------------- score


@hookspec(firstresult=True)
def mirage_score(
    run: RunSession, contexts: list[list[int]], responses: list[list[int]]
) -> list[list[float]] | None:
    """Teacher-forced log-probabilities of each response given its context.

    Receives token-id lists of equal count; returns, per pair, the log-prob of every
    response token under the current policy (no gradient). First non-None result wins.
    Called after rollout (old log-probs); in a data-parallel run each process scores its
    share of the pairs.
    """


@hookspec(firstresult=True)
def mirage_cross_score(
    run: RunSession, contexts: list[list[int]], responses: list[list[int]]
) -> CrossScores | None:
    """Score every response under every context (the MI proxies' cross-scoring).

    Receives C distinct contexts and R responses (token ids); returns a
    :class:`mirage.core.rl.backend.CrossScores` of ``[R, C]`` summed log-probs and summed
    entropies under the current policy (no gradient). First non-None result wins. The
    default reuses each context's key/value cache. Called by the ``mi`` diagnostic; in a
    data-parallel run each process scores its share of the responses.
    """


# --------------------------------------------------------------------------- diagnose


@hookspec
def mirage_diagnose(run: RunSession, batch: Batch) -> Mapping[str, float] | None:
    """Measure the batch; every implementation's metrics are merged.

    Receives the batch after rollout and score, before filtering and the update (the
    policy is the one that sampled it); returns ``{metric_name: value}`` or None. All
    results are collected. Called once per iteration, after score (and at step 0). A
    name that is not segments of letters, digits and ``_.@-`` joined by ``/``, or a
    value that is not a number or is infinite, fails the run naming the plugin (NaN
    means undefined and is not stored).
    """


# --------------------------------------------------------------------------- filter


@hookspec(firstresult=True)
def mirage_filter(run: RunSession, batch: Batch) -> Selection | None:
    """Choose which prompt groups (and trajectories) the update will see.

    Receives the scored batch; returns a :class:`mirage.core.rl.batch.Selection`. First
    non-None result wins. Called once per iteration, after score and diagnose. Group
    and sample indices must be unique integers in range (samples only for kept groups)
    and metrics well formed, or the run fails naming the filter and its plugin.
    """


# --------------------------------------------------------------------------- update


@hookspec(firstresult=True)
def mirage_update(run: RunSession, batch: Batch) -> Mapping[str, float] | None:
    """Take the optimisation step(s) of one iteration on the kept part of ``batch``.

    Receives the batch after filtering (``batch.kept_groups()`` is what to train on);
    returns the update's metrics (loss, clip fraction, gradient norm...). First
    non-None result wins. Not called when the filter kept nothing. Malformed metrics
    fail the run, naming the algorithm and its plugin.
    """


# --------------------------------------------------------------------------- step end


@hookspec
def mirage_step_end(run: RunSession, run_id: str, step: int, metrics: Mapping[str, float]) -> None:
    """One step is in the store.

    Receives the step and exactly the metrics the store now holds for it (training,
    filter, update, diagnostics, timings and, on validation steps, validation; NaN
    values are not stored and not passed); returns nothing. Every implementation is
    called (not firstresult), once per step (step 0 included), right after the store
    write.
    """


@hookspec
def mirage_run_end(run: RunSession, run_id: str, status: str, message: str | None) -> None:
    """The run ended with ``status`` (``finished``, ``stopped`` or ``failed``).

    Receives the status the store records and its reason (None when finished); returns
    nothing. Every implementation is called (not firstresult), once, whether the run
    finished or not.
    """

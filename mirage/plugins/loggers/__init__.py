"""The built-in loggers (docs/loggers.md): experiment trackers that mirror the store.

* ``wandb`` (:mod:`.wandb_logger`): Weights & Biases, offline by default;
* ``mlflow`` (:mod:`.mlflow_logger`): MLflow, a local SQLite store by default;
* ``tensorboard`` (:mod:`.tensorboard_logger`): TensorBoard event files.

Each is opt-in (``loggers.names``) and needs its extra (``pip install 'mirage-rl[wandb]'``).
This plugin also implements the run hooks by delegating to the loggers the run selected;
a logger that raises is dropped from the run with a ``logger`` event, and the run goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.session import RunSession
from mirage.core.run.run_hooks import guarded
from mirage.plugins.loggers.mlflow_logger import MlflowLogger
from mirage.plugins.loggers.tensorboard_logger import TensorBoardLogger
from mirage.plugins.loggers.wandb_logger import WandbLogger

__all__ = ["MlflowLogger", "TensorBoardLogger", "WandbLogger"]


@hookimpl
def mirage_register_loggers(register):
    register("wandb", WandbLogger)
    register("mlflow", MlflowLogger)
    register("tensorboard", TensorBoardLogger)


def _each(run: RunSession, when: str, call: Callable[[Any], None]) -> None:
    """``call`` every logger of the run; drop one that raises (a notice names it)."""
    for name, logger in list(run.loggers.items()):
        source = f"logger {name!r} (plugin {run.plugins.registries.loggers.owner(name)!r})"
        if not guarded(run, source, when, lambda: call(logger)):
            del run.loggers[name]


@hookimpl
def mirage_run_start(run: RunSession, run_id: str, store_dir: Path, first_step: int) -> None:
    _each(run, f"at the start (step {first_step})",
          lambda logger: logger.open(run_id, run.config, store_dir, first_step))


@hookimpl
def mirage_step_end(run: RunSession, step: int, metrics: Mapping[str, float]) -> None:
    _each(run, f"at step {step}", lambda logger: logger.log(step, metrics))


@hookimpl
def mirage_run_end(run: RunSession, status: str) -> None:
    _each(run, f"at the end (status {status})", lambda logger: logger.close(status))

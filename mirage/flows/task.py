"""One sweep cell as a Prefect task: run its config into the cell's own DuckDB file.

A cell never opens the main store: it writes ``cells/<config hash>/cell.duckdb`` (the
run, its checkpoints beside it) and ``outcome.json`` (status, run id, error), and the
sweep's load step imports finished cells into the main store. A cell whose earlier attempt
was killed (no outcome, its process gone, a checkpoint saved) resumes from its newest
checkpoint instead of starting over, so a sweep stopped mid-cell loses at most the steps
since that checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
from prefect import task

from mirage.core.parallel.local_ray import LOCAL_RAY
from mirage.flows.cells import CELL_DB, OUTCOME, CellSpec, cell_dir, read_outcome  # noqa: F401 (re-exported)


class CellFailed(RuntimeError):
    """A cell's run raised; the message is the run's error."""


def execute_cell(spec: CellSpec, root: Path, workers: int = 1, ray_address: str | None = None,
                 launcher: str = "torchrun") -> dict[str, Any]:
    """Run the cell into its directory (resuming what a killed attempt left, else from
    scratch); return (and write) its outcome:
    ``{"status": finished|stopped|failed, "run_id": str|None, "error": str|None, "config": ...,
    "config_hash": ...}``. With ``workers`` > 1 the cell is one data-parallel run on that
    many processes (its config has ``model.parallel: ddp``), started by ``launcher``
    (``torchrun`` on this machine, or ``ray``: Ray Train workers at ``ray_address``)."""
    from mirage.core.config.run_config import RunConfig
    from mirage.core.run.loop import RunStopped, execute

    directory = cell_dir(root, spec)
    resume = unfinished_run(directory, spec)
    if resume is None:
        shutil.rmtree(directory, ignore_errors=True)  # what an earlier attempt left that cannot resume
        directory.mkdir(parents=True)
    db = directory / CELL_DB
    # The config travels with the outcome: a later sweep reuses the cell only for this config.
    outcome: dict[str, Any] = {"status": "finished", "run_id": None, "error": None,
                               "config": spec.config, "config_hash": spec.config_hash}
    try:
        config = RunConfig.model_validate(spec.config)
        if workers > 1:
            outcome |= _launched(config, spec, db, workers, launcher, ray_address, resume)
        elif resume:
            outcome["run_id"] = execute(None, db, resume=resume, progress=False)
        else:
            outcome["run_id"] = execute(config, db, progress=False, experiment=spec.experiment, cell=spec.cell)
    except RunStopped as error:
        outcome |= {"status": "stopped", "error": str(error)}
    except Exception as error:  # recorded for the load step; the sweep goes on
        outcome |= {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    tmp = directory / f".{OUTCOME}"
    tmp.write_text(json.dumps(outcome))
    tmp.rename(directory / OUTCOME)  # an outcome exists whole or not at all
    return outcome


def unfinished_run(directory: Path, spec: CellSpec) -> str | None:
    """The run a killed attempt at this cell left in ``directory`` to resume: the cell
    has no outcome, its store holds one run of this very config, and
    :func:`mirage.core.run.checkpoints.plan_resume` accepts it (its process is gone and its
    newest checkpoint covers what it stored). None when the cell starts over."""
    from mirage.core.config.run_config import RunConfig
    from mirage.core.errors import ConfigError
    from mirage.core.run.checkpoints import plan_resume
    from mirage.core.store.run_store import RunStore

    db = directory / CELL_DB
    if read_outcome(directory) is not None or not db.exists():
        return None
    try:
        runs = RunStore(db).list_runs()
        if len(runs) != 1 or RunConfig.model_validate(runs[0]["config"]).run_hash() != spec.config_hash:
            return None
        plan_resume(db, runs[0]["run_id"], None)
    except (ConfigError, OSError, ValueError, duckdb.Error):
        return None  # a store the killed attempt left unreadable, or nothing worth resuming
    return runs[0]["run_id"]


def _launched(config: Any, spec: CellSpec, db: Path, workers: int, launcher: str,
              ray_address: str | None, resume: str | None = None) -> dict[str, Any]:
    """The cell on ``workers`` processes (resuming run ``resume``): its stored status and error."""
    from mirage.core.run.launch import launch, make_job
    from mirage.core.store.run_store import new_run_id

    run_id = resume or new_run_id()
    job = make_job(workers, db=db, run_id=run_id, config=None if resume else config, resume=resume is not None,
                   progress=False, threads_setting=config.threads,
                   experiment=spec.experiment, cell=spec.cell, on_this_machine=ray_address in (None, LOCAL_RAY))
    status, error = launch(job, workers, launcher, ray_address)
    return {"run_id": run_id, "status": status, "error": None if status == "finished" else error}


@task(name="cell")
def run_cell(spec: CellSpec, root: str, workers: int = 1, ray_address: str | None = None,
             launcher: str = "torchrun") -> dict[str, Any]:
    """Prefect task: one cell; raises CellFailed (after recording it) so the task run
    shows as failed while the other cells go on."""
    outcome = execute_cell(spec, Path(root), workers, ray_address, launcher)
    if outcome["status"] == "failed":
        raise CellFailed(outcome["error"])
    return outcome

"""One sweep cell as a Prefect task: run its config into the cell's own DuckDB file.

A cell never opens the main store: it writes ``cells/<config hash>/cell.duckdb`` (the
run, its checkpoints beside it) and ``outcome.json`` (status, run id, error), and the
sweep's load step imports finished cells into the main store.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from prefect import task

from mirage.flows.cells import CELL_DB, OUTCOME, CellSpec, cell_dir, read_outcome  # noqa: F401 (re-exported)


class CellFailed(RuntimeError):
    """A cell's run raised; the message is the run's error."""


def execute_cell(spec: CellSpec, root: Path) -> dict[str, Any]:
    """Run the cell from scratch into its directory; return (and write) its outcome:
    ``{"status": finished|stopped|failed, "run_id": str|None, "error": str|None, "config": ...,
    "config_hash": ...}``."""
    from mirage.core.config.run_config import RunConfig
    from mirage.core.run.loop import RunStopped, execute

    directory = cell_dir(root, spec)
    shutil.rmtree(directory, ignore_errors=True)  # what an earlier, unfinished attempt left
    directory.mkdir(parents=True)
    db = directory / CELL_DB
    # The config travels with the outcome: a later sweep reuses the cell only for this config.
    outcome: dict[str, Any] = {"status": "finished", "run_id": None, "error": None,
                               "config": spec.config, "config_hash": spec.config_hash}
    try:
        outcome["run_id"] = execute(RunConfig.model_validate(spec.config), db, progress=False,
                                    experiment=spec.experiment, cell=spec.cell)
    except RunStopped as error:
        outcome |= {"status": "stopped", "error": str(error)}
    except Exception as error:  # recorded for the load step; the sweep goes on
        outcome |= {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    tmp = directory / f".{OUTCOME}"
    tmp.write_text(json.dumps(outcome))
    tmp.rename(directory / OUTCOME)  # an outcome exists whole or not at all
    return outcome


@task(name="cell")
def run_cell(spec: CellSpec, root: str) -> dict[str, Any]:
    """Prefect task: one cell; raises CellFailed (after recording it) so the task run
    shows as failed while the other cells go on."""
    outcome = execute_cell(spec, Path(root))
    if outcome["status"] == "failed":
        raise CellFailed(outcome["error"])
    return outcome

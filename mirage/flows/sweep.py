"""The ``sweep`` flow: one registry.yaml experiment as a grid of Prefect tasks.

Plan (validate every cell before anything runs) -> reuse cells whose resolved config
already ran (cache key: config hash) -> record the sweep and its pending cells in the
main store -> run the rest on the chosen task runner, each into its own files, and load
each cell into the main store as soon as it ends (this process is the store's only
writer), so a running sweep's finished cells are in the store and its progress in the
``sweeps``/``sweep_cells`` tables -> store and print the summary. The final state's
message counts the cells and names the first failed cell's reason.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.futures import as_completed
from prefect.runtime import flow_run
from prefect.states import Completed, Failed

from mirage.core.errors import ConfigError
from mirage.core.store.run_store import RunStore, default_db_path, new_run_id
from mirage.flows.cells import CellSpec, cell_root, check_cell_workers, plan_cells
from mirage.flows.load import completed_runs, load_cell, pending_cell, ran_before, reused_cell
from mirage.flows.runners import Runner, check_width, make_task_runner, shared_api_server
from mirage.flows.summary import first_failure, progress_line, render, verdict
from mirage.flows.sweep_store import SweepStore
from mirage.flows.task import run_cell


def _record(sweeps: SweepStore, sweep_id: str, rows: dict[str, dict[str, Any]],
            row: dict[str, Any]) -> None:
    """A cell ended: store its summary row and print the progress line."""
    rows[row["config_hash"]] = row
    sweeps.update_sweep_cell(sweep_id, {"sweep_id": sweep_id, **row})
    print(progress_line(row, list(rows.values())))


def run_cells(task_runner: Any, specs: list[CellSpec], root: Path, store: RunStore,
              sweeps: SweepStore, sweep_id: str, rows: dict[str, dict[str, Any]],
              cell_options: dict[str, Any] | None = None) -> None:
    """Submit every cell to ``task_runner`` (chosen per sweep, so entered here rather
    than fixed on the flow); load each into ``store`` as it ends, record it in ``sweeps``
    and print a progress line. The lines are this flow run's logs, which `--watch` prints. ``rows``: every
    cell's summary row by config hash (pending ones included), for the counts."""
    with shared_api_server(), task_runner:
        futures = [
            task_runner.submit(run_cell.with_options(task_run_name=f"{spec.cell} seed={spec.seed}"),
                               {"spec": spec, "root": str(root), **(cell_options or {})})
            for spec in specs
        ]
        names = {future.task_run_id: spec for future, spec in zip(futures, specs)}
        for future in as_completed(futures):
            future.result(raise_on_failure=False)  # a failed cell recorded its outcome
            _record(sweeps, sweep_id, rows, load_cell(store, names[future.task_run_id], root))


@flow(name="sweep", log_prints=True)
def sweep(
    experiment: str,
    grid: dict[str, list[Any]] | None = None,
    settings: dict[str, Any] | None = None,
    seeds: list[int] | None = None,
    preset: str | None = None,
    force: bool = False,
    width: int = 2,
    runner: Runner = "process",
    ray_address: str | None = None,
    db: str | None = None,
    registry: str | None = None,
    cell_workers: int = 1,
):
    """Run ``experiment``'s grid. ``grid`` replaces or adds axes (dotted path -> values),
    ``settings`` fixes dotted paths in every cell (an axis on that path gives way),
    ``seeds`` replaces the replicate seeds and ``preset`` (``tiny``) shrinks the run;
    ``force`` recomputes cells that already ran; ``width`` cells run at once on the
    ``runner`` (``process``, ``thread`` or ``ray`` at ``ray_address``); results go to
    ``db`` (default ``$MIRAGE_DB`` or runs/mirage.duckdb). ``cell_workers`` > 1 runs each
    cell data-parallel on that many processes (``model.parallel: ddp``; Ray Train workers
    with the ``ray`` runner, torchrun's launcher otherwise; docs/scaling.md)."""
    try:
        check_width(width)
        specs = plan_cells(experiment, registry, grid=grid, settings=settings, seeds=seeds,
                           preset=preset)
        check_cell_workers(cell_workers, specs)
    except ConfigError as error:  # one line in the final state, no traceback
        return Failed(message=f"{experiment}: {error}")
    target = Path(db) if db else default_db_path()
    store, sweeps = RunStore(target), SweepStore(target)
    root = cell_root(target)
    cache = {} if force else completed_runs(store)
    todo = [s for s in specs if s.config_hash not in cache]
    # A cell that finished in an earlier sweep whose load step never ran is only loaded.
    pending = [s for s in todo if force or not ran_before(root, s)]
    print(f"{experiment}: {len(specs)} cells; {len(specs) - len(todo)} already in {target}, "
          f"{len(pending)} to run on {runner} (width {width})")
    sweep_id = flow_run.get_id() or new_run_id()
    rows = {s.config_hash: reused_cell(store, s, cache[s.config_hash]) if s.config_hash in cache
            else pending_cell(s) for s in specs}
    sweeps.start_sweep(sweep_id, experiment, [{"sweep_id": sweep_id, **row} for row in rows.values()],
                      host=socket.gethostname(), pid=os.getpid())
    to_run = {s.config_hash for s in pending}
    for spec in (s for s in todo if s.config_hash not in to_run):
        _record(sweeps, sweep_id, rows, load_cell(store, spec, root, loaded=True))
    if pending:
        try:
            run_cells(make_task_runner(runner, width, ray_address), pending, root, store, sweeps,
                      sweep_id, rows, None if cell_workers == 1 else {
                          "workers": cell_workers, "ray_address": ray_address,
                          "launcher": "ray" if runner == "ray" else "torchrun"})
        except Exception as error:  # the runner broke off (e.g. Ray lost): load what is there
            print(f"the task runner stopped: {type(error).__name__}: {error}")
    # The store is the record of what was loaded: cells the runner never got to report
    # are still pending there and are loaded now.
    rows = {row["config_hash"]: row for row in sweeps.sweep_cells(sweep_id)}
    for spec in (s for s in pending if rows[s.config_hash]["status"] == "pending"):
        _record(sweeps, sweep_id, rows, load_cell(store, spec, root))
    summary = [rows[s.config_hash] for s in specs]
    print(f"sweep {sweep_id} ({experiment}), summary stored in {target} (table sweep_cells):\n"
          + render(summary))
    failure = first_failure(summary)
    message = f"{experiment}: {verdict(summary)}" + (f"; first failure: {failure}" if failure else "")
    sweeps.finish_sweep(sweep_id, "failed" if failure else "completed", message)
    return Failed(message=message) if failure else Completed(message=message)

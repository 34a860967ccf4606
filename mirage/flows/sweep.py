"""The ``sweep`` flow: one registry.yaml experiment as a grid of Prefect tasks.

Plan (validate every cell before anything runs) -> reuse cells whose resolved config
already ran (cache key: config hash) -> run the rest on the chosen task runner, each
into its own files -> load them into the main store (this process is its only writer)
-> store and print the summary. The final state says how many cells failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow
from prefect.futures import as_completed
from prefect.runtime import flow_run
from prefect.states import Completed, Failed

from mirage.core.store import RunStore, default_db_path, new_run_id
from mirage.flows.cells import CellSpec, cell_root, plan_cells
from mirage.flows.load import completed_runs, load_cell, ran_before, reused_cell
from mirage.flows.runners import Runner, check_width, make_task_runner
from mirage.flows.summary import render, verdict
from mirage.flows.task import run_cell


@flow(name="sweep-cells", log_prints=True, validate_parameters=False)
def run_cells(specs: list[CellSpec], root: str) -> None:
    """Submit every cell to this flow's task runner and report each as it ends."""
    futures = [
        run_cell.with_options(task_run_name=f"{spec.cell} seed={spec.seed}").submit(spec, root)
        for spec in specs
    ]
    names = {future.task_run_id: spec for future, spec in zip(futures, specs)}
    for done, future in enumerate(as_completed(futures), start=1):
        spec = names[future.task_run_id]
        outcome = future.result(raise_on_failure=False)
        said = outcome["status"] if isinstance(outcome, dict) else f"failed ({outcome})"
        print(f"[{done}/{len(specs)}] {spec.cell} seed={spec.seed}: {said}")


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
):
    """Run ``experiment``'s grid. ``grid`` replaces or adds axes (dotted path -> values),
    ``settings`` fixes dotted paths in every cell (an axis on that path gives way),
    ``seeds`` replaces the replicate seeds and ``preset`` (``tiny``) shrinks the run;
    ``force`` recomputes cells that already ran; ``width`` cells run at once on the
    ``runner`` (``process``, ``thread`` or ``ray`` at ``ray_address``); results go to
    ``db`` (default ``$MIRAGE_DB`` or runs/mirage.duckdb)."""
    check_width(width)
    specs = plan_cells(experiment, registry, grid=grid, settings=settings, seeds=seeds,
                       preset=preset)
    target = Path(db) if db else default_db_path()
    store = RunStore(target)
    root = cell_root(target)
    cache = {} if force else completed_runs(store)
    todo = [s for s in specs if s.config_hash not in cache]
    # A cell that finished in an earlier sweep whose load step never ran is only loaded.
    pending = [s for s in todo if force or not ran_before(root, s)]
    print(f"{experiment}: {len(specs)} cells; {len(specs) - len(todo)} already in {target}, "
          f"{len(pending)} to run on {runner} (width {width})")
    if pending:
        cells_flow = run_cells.with_options(task_runner=make_task_runner(runner, width, ray_address))
        cells_flow(pending, str(root), return_state=True)
    ran = {s.config_hash for s in pending}
    rows = [reused_cell(store, s, cache[s.config_hash]) if s.config_hash in cache
            else load_cell(store, s, root, loaded=s.config_hash not in ran) for s in specs]
    sweep_id = flow_run.get_id() or new_run_id()
    store.record_sweep_cells([{"sweep_id": sweep_id, **row} for row in rows])
    print(f"sweep {sweep_id} ({experiment}), summary stored in {target} (table sweep_cells):\n"
          + render(rows))
    message = f"{experiment}: {verdict(rows)}"
    if any(row["status"] == "failed" for row in rows):
        return Failed(message=message)
    return Completed(message=message)

"""The flows' commands: ``core sweep`` (run an experiment's grid), ``core sweeps`` (their
progress) and ``core serve`` (one Prefect deployment per experiment). A built-in command
plugin (listed in :mod:`mirage.builtins`): the ``core`` program asks it for its commands
through ``mirage_register_commands``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from mirage.core.cli.common import (
    DB_HELP, REGISTRY_HELP, check_host, check_paths, check_readable_store, fail, is_loopback, pairs, settings,
)
from mirage.core.config.overrides import setting_type
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.store.run_store import default_db_path

_RUNNER_HELP = "cells run on a local process pool (process), threads (thread) or Ray (ray)"


def _check_runner(runner: str, width: int, ray_address: Optional[str] = None) -> None:
    """Exit 2 with one line for an unknown runner, a width out of range, or a local Ray
    not asked for by name (it would listen on every interface)."""
    from mirage.core.parallel.local_ray import local_ray_refusal
    from mirage.flows.runners import RUNNERS, check_width

    if runner not in RUNNERS:
        fail(f"unknown runner {runner!r}; valid: {', '.join(RUNNERS)}")
    if runner == "ray" and ray_address is None:
        fail(local_ray_refusal("--runner ray"))
    try:
        check_width(width)
    except ConfigError as error:
        fail(str(error))


def sweep(
    experiment: str = typer.Argument(..., help="registry.yaml experiment"),
    grid: list[str] = typer.Option([], "--grid", help='replace or add an axis PATH=JSON_LIST, e.g. env.options.slip="[0, 0.5]"'),
    set_: list[str] = typer.Option([], "--set", help="fix PATH=VALUE in every cell, e.g. steps=5"),
    seeds: Optional[str] = typer.Option(None, help="replicate seeds, comma-separated [default: the experiment's]"),
    preset: Optional[str] = typer.Option(None, help="shrink every cell: tiny"),
    force: bool = typer.Option(False, help="recompute cells that already ran"),
    width: int = typer.Option(2, help="cells at once (1-64)"),
    runner: str = typer.Option("process", help=_RUNNER_HELP),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address of --runner ray ('local' "
                                               "starts a local Ray, which listens on every interface)"),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
    cell_workers: int = typer.Option(1, help="processes per cell: each cell one data-parallel run "
                                     "(needs model.parallel: ddp or fsdp; Ray Train workers with --runner ray)"),
) -> None:
    """Run an experiment's grid in this process (the served deployment does the same)."""
    import os

    from mirage.flows.cells import check_cell_workers, plan_cells
    from mirage.flows.supervise import SUPERVISED, supervise, watch_parent

    _check_ray_address(ray_address)
    _check_runner(runner, width, ray_address)
    check_paths(db if db is not None else default_db_path(), None)
    axes, fixed = pairs(grid, "--grid"), settings(set_)
    for path in axes:
        try:
            setting_type(path, "--grid")
        except ConfigError as error:
            fail(str(error))
    try:
        seed_list = None if seeds is None else [int(s) for s in seeds.split(",")]
    except ValueError:
        fail(f"--seeds expects comma-separated integers, got {seeds!r}")
    try:  # validate before Prefect starts
        specs = plan_cells(experiment, registry, grid=axes, settings=fixed, seeds=seed_list, preset=preset)
        check_cell_workers(cell_workers, specs)
    except ConfigError as error:
        fail(str(error))
    if not os.environ.get(SUPERVISED):
        # The flow runs in a child process group this process owns: however this process
        # ends (a signal, or SIGKILL via the child's watchdog), the group ends with it.
        argv = ["sweep", experiment, "--width", str(width), "--runner", runner,
                "--cell-workers", str(cell_workers)]
        argv += [a for pair in grid for a in ("--grid", pair)] + [a for pair in set_ for a in ("--set", pair)]
        for flag, value in (("--seeds", seeds), ("--preset", preset), ("--ray-address", ray_address),
                            ("--db", db), ("--registry", registry)):
            argv += [flag, str(value)] if value is not None else []
        raise typer.Exit(supervise(argv + (["--force"] if force else [])))
    watch_parent(int(os.environ[SUPERVISED]))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from mirage.flows.sweep import sweep as sweep_flow

    state = sweep_flow(experiment, grid=axes, settings=fixed, seeds=seed_list, preset=preset,
                       force=force, width=width, runner=runner, ray_address=ray_address,
                       db=str(db) if db else None, registry=str(registry) if registry else None,
                       cell_workers=cell_workers, return_state=True)
    typer.echo(f"{state.name}: {state.message}")
    raise typer.Exit(0 if state.is_completed() else 1)


def sweeps(
    sweep_id: Optional[str] = typer.Argument(None, help="one sweep (an id or its prefix): every cell"),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    last: int = typer.Option(5, help="how many of the newest sweeps to list"),
) -> None:
    """Progress of the store's sweeps, newest first, while they run: one line per sweep
    with its cell counts, then its running cells (with their step) and failed cells
    (with the reason). With SWEEP_ID, every cell of that sweep. Reads only."""
    from mirage.flows.progress import cell_line, read_sweeps

    target = db if db is not None else default_db_path()
    check_readable_store(target)
    if sweep_id is not None and not sweep_id.strip():
        fail("SWEEP_ID: empty; leave it out to list the newest sweeps")
    if last < 1:
        fail(f"--last {last}: expected a count of at least 1")
    found = read_sweeps(target, last=None if sweep_id else last)
    if sweep_id is not None:
        chosen = [s for s in found if s.sweep_id.startswith(sweep_id)]
        if not chosen:
            known = ", ".join(s.sweep_id for s in found[:10]) or "none"
            fail(f"no sweep {sweep_id!r} in {target}; sweeps: {known}")
        if len(chosen) > 1:
            fail(f"sweep {sweep_id!r} is ambiguous: {', '.join(s.sweep_id for s in chosen)}")
        found = chosen
    if not found:
        typer.echo(f"no sweeps in {target}")
    for one in found:
        typer.echo(one.headline())
        for cell in one.cells:
            if sweep_id is not None or cell["status"] in ("running", "failed"):
                typer.echo(f"  {cell_line(cell)}")


def serve(
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    width: int = typer.Option(2, help="cells at once (deployment default)"),
    runner: str = typer.Option("process", help=_RUNNER_HELP),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address of --runner ray ('local' "
                                               "starts a local Ray, which listens on every interface)"),
    host: str = typer.Option("127.0.0.1", help="local Prefect server host (when PREFECT_API_URL is unset)"),
    port: int = typer.Option(4200, help="local Prefect server port (when PREFECT_API_URL is unset)"),
) -> None:
    """Serve one `sweep` deployment per registry.yaml experiment: run a grid with
    `prefect deployment run sweep/NAME`. Starts a local Prefect server unless
    PREFECT_API_URL names one."""
    from mirage.core.run.experiments import default_registry_path
    from mirage.flows.serve import serve_registry

    _check_ray_address(ray_address)
    _check_runner(runner, width, ray_address)
    check_paths(db if db is not None else default_db_path(), None)
    check_host(host)
    if not is_loopback(host):
        typer.echo(f"warning: core serve --host {host}: the Prefect server it starts (its API runs any "
                   "served sweep for whoever reaches it) listens beyond this machine, with no "
                   "authentication (docs/security.md)", err=True)
    if not 0 < port < 65536:
        fail(f"--port {port} is not a port number (1-65535)")
    defaults = {
        "db": str((db or default_db_path()).resolve()),
        "registry": str((registry or default_registry_path()).resolve()),
        "width": width, "runner": runner, "ray_address": ray_address,
    }
    try:
        serve_registry(registry, defaults, host, port)
    except (ConfigError, RuntimeError) as error:
        fail(str(error))


def _check_ray_address(address: Optional[str]) -> None:
    if address is not None and not address.strip():
        fail("--ray-address: empty; give one such as ray://HOST:10001 or auto, or 'local' for a "
             "local Ray")


@hookimpl
def mirage_register_commands(cli: typer.Typer) -> None:
    for command in (sweep, sweeps, serve):
        cli.command()(command)

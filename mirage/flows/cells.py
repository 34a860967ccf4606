"""An experiment's cells, ready to run: resolved config, its hash (the cache key), labels."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirage.core.config.presets import TINY
from mirage.core.errors import ConfigError
from mirage.core.run.experiments import Experiment, cell_label, load_registry

PRESETS: dict[str, dict[str, Any]] = {"tiny": TINY}
OUTCOME = "outcome.json"
CELL_DB = "cell.duckdb"


@dataclass(frozen=True)
class CellSpec:
    """One cell of a sweep: what to run and how to label it in the store."""

    experiment: str
    cell: str
    seed: int
    config: dict[str, Any]  # the resolved RunConfig as JSON data
    config_hash: str


def plan_cells(
    experiment: str,
    registry: str | Path | None = None,
    *,
    grid: dict[str, list[Any]] | None = None,
    settings: dict[str, Any] | None = None,
    seeds: list[int] | None = None,
    preset: str | None = None,
    plugins: Any = None,
) -> list[CellSpec]:
    """The cells of ``experiment`` after overrides, every one checked against the plugin
    registries. Raises ConfigError naming an unknown experiment, preset, axis, value or
    component (with the valid choices) before anything runs."""
    experiments = load_registry(Path(registry) if registry else None)
    if experiment not in experiments:
        raise ConfigError(f"unknown experiment {experiment!r}; valid: {', '.join(sorted(experiments))}")
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; valid: {', '.join(sorted(PRESETS))}")
    chosen: Experiment = experiments[experiment].overridden(
        grid=grid, settings=settings, seeds=seeds, preset=PRESETS.get(preset or "", None)
    )
    if plugins is None:
        from mirage.core.plugin_api.manager import build_plugins

        plugins = build_plugins()
    try:
        chosen.check(plugins)
    except ConfigError as error:
        raise ConfigError(f"experiment {experiment!r} cannot start: {error}") from None
    return [
        CellSpec(experiment, cell_label(point), int(point["seed"]), config.model_dump(mode="json"),
                 config.run_hash())
        for point, config in chosen.cells(plugins)
    ]


def cell_root(db: str | Path) -> Path:
    """Where cells write their own files: ``cells/`` beside the main store."""
    return Path(db).resolve().parent / "cells"


def cell_dir(root: Path, spec: CellSpec) -> Path:
    """A cell's own folder: its DuckDB file, checkpoints and outcome."""
    return Path(root) / spec.config_hash


def read_outcome(directory: Path) -> dict[str, Any] | None:
    """The outcome a cell recorded, or None if it never finished writing one."""
    try:
        return json.loads((directory / OUTCOME).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def check_cell_workers(workers: int, specs: list[CellSpec]) -> None:
    """ConfigError unless every cell can run on ``workers`` processes."""
    if workers < 1:
        raise ConfigError(f"cell_workers {workers}: expected a whole number of processes >= 1")
    single = [s.cell for s in specs if s.config["model"].get("parallel", "none") == "none"]
    if workers > 1 and single:
        raise ConfigError(f"cell_workers {workers} runs each cell data-parallel, which needs "
                          f"model.parallel: ddp or fsdp (--set model.parallel=ddp); cell {single[0]} has none")

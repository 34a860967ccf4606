"""``registry.yaml``: named experiments as grids over the typed RunConfig.

Each experiment has a partial ``base`` config, ``grid`` axes (dotted config paths ->
values), optional ``variants`` (partial configs, for settings that change together, such
as P x G splits of one rollout budget) and replicate ``seeds``; its cells are every
combination of variant, axis values and seed. Loading validates every cell's values, so a
malformed file fails before anything runs. Component names (environments, filters, ...)
are checked against the plugin registries by :meth:`Experiment.check`: an experiment
that needs a component nobody registered is still listed, but refuses to start.
"""

from __future__ import annotations

import itertools
import json
import os
from importlib.resources import files
from pathlib import Path
from typing import Any, Iterator

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mirage.core.config.overrides import assign, merged
from mirage.core.config.paths import read_text_file
from mirage.core.config.run_config import MAX_SEED, RunConfig
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.loaded_plugins import Plugins
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.validate import build_config, one_line, parse_config, validate_config


class Experiment(BaseModel):
    """One named grid."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    variants: list[dict[str, Any]] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=lambda: [0])
    scale_up: str = Field("", description="how to run it at the paper's size")

    @field_validator("grid")
    @classmethod
    def _axes_have_values(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        # An empty axis makes a grid of 0 cells: a sweep would "complete" doing nothing.
        for axis, values in grid.items():
            if not values:
                raise ValueError(f"grid axis {axis!r} has no values")
        return grid

    @field_validator("seeds")
    @classmethod
    def _seeds_in_range(cls, seeds: list[int]) -> list[int]:
        if not seeds:
            raise ValueError("seeds is empty: an experiment needs at least one seed")
        for seed in seeds:
            if not 0 <= seed <= MAX_SEED:
                raise ValueError(f"seed {seed} is outside 0..{MAX_SEED}")
        return seeds

    def cells(self, plugins: Plugins | None = None) -> list[tuple[dict[str, Any], RunConfig]]:
        """(point, config) for every variant, grid point and seed; ``point`` maps dotted
        paths (the variant's settings, the axes, ``seed``) to their values, ``config`` is
        resolved with ``plugins``' registries (None: the default plugins). Cells that
        resolve to the same config are kept once. Seed-major: every configuration of one
        seed comes before the next seed's, so a sweep stopped early holds complete
        seed-paired comparisons, and cells sharing a warm start run together."""
        plugins = plugins or build_plugins()
        out, seen = [], set()
        for point, data in self._cell_data():
            config = build_config(data, plugins)
            if (key := config.run_hash()) not in seen:
                seen.add(key)
                out.append((point, config))
        return out

    def check_values(self) -> None:
        """Raise ConfigError naming the first value a cell's config refuses; needs no
        plugins (component names and presets are checked by :meth:`check`)."""
        for _, data in self._cell_data():
            parse_config(data)

    def listed_cells(self) -> int:
        """How many cells the grid lists (variants x axis values x seeds), before cells
        resolving to the same config are merged."""
        return sum(1 for _ in self._cell_data())

    def _cell_data(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        axes = list(self.grid)
        for seed in self.seeds:
            for variant in self.variants or [{}]:
                for values in itertools.product(*(self.grid[a] for a in axes)):
                    point = _flatten(variant) | dict(zip(axes, values)) | {"seed": seed}
                    data = merged(self.base, variant)
                    for path, value in point.items():
                        assign(data, path, value)
                    yield point, data

    def overridden(self, grid: dict[str, list[Any]] | None = None,
                   settings: dict[str, Any] | None = None,
                   seeds: list[int] | None = None,
                   preset: dict[str, Any] | None = None) -> "Experiment":
        """A copy with axes replaced or added (``grid``), settings fixed for every cell
        (``settings``: dotted path -> value; an axis or variant setting on the same path
        gives way), other ``seeds``, and a ``preset`` (a partial config such as the tiny
        preset) over the base, under the axes and variants. Raises ConfigError naming a
        bad override."""
        data = self.model_dump()
        data["base"] = merged(data["base"], preset or {})
        for path, values in (grid or {}).items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"grid axis {path!r} needs a non-empty list of values (got {values!r})")
            data["grid"][path] = values
        for path, value in (settings or {}).items():
            if path == "seed":
                data["seeds"] = [value]
                continue
            data["grid"] = {a: v for a, v in data["grid"].items() if not _covers(path, a)}
            data["variants"] = [_drop(v, path) for v in data["variants"]]
            assign(data["base"], path, value)
        data["variants"] = [v for i, v in enumerate(data["variants"]) if v not in data["variants"][:i]]
        if seeds is not None:
            data["seeds"] = seeds
        try:
            experiment = Experiment.model_validate(data)
        except ValidationError as error:
            raise ConfigError(one_line(error)) from None
        experiment.check_values()
        return experiment

    def check(self, plugins: Plugins) -> None:
        """Raise ConfigError naming the first cell whose components or values the
        plugin registries refuse (an unknown name lists the valid ones)."""
        for point, data in self._cell_data():
            try:
                validate_config(parse_config(data), plugins)  # which resolves it
            except ConfigError as error:
                raise ConfigError(f"cell {cell_label(point)!r}: {error}") from None


def cell_label(point: dict[str, Any]) -> str:
    """A cell's name: its axis and variant values without the seed, e.g.
    ``env.options.slip=0.1 filter.name=top_p`` (``base`` when there are none)."""
    parts = [f"{k}={json.dumps(v)}" if not isinstance(v, str) else f"{k}={v}"
             for k, v in point.items() if k != "seed"]
    return " ".join(parts) or "base"


def default_registry_path() -> Path:
    """The registry used without ``--registry``: ``$MIRAGE_REGISTRY``, else the user's own
    ``./registry.yaml``, else the one shipped with the package (package data: in a
    checkout, a link to the repository's registry.yaml)."""
    if env := os.environ.get("MIRAGE_REGISTRY"):
        return Path(env)
    local = Path("registry.yaml")
    return local if local.exists() else Path(str(files("mirage") / "registry.yaml"))


def load_registry(path: Path | None = None) -> dict[str, Experiment]:
    """Parse and validate every experiment; raise ConfigError naming what is wrong."""
    path = path or default_registry_path()
    try:
        raw = yaml.safe_load(read_text_file(Path(path), "registry"))
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("experiments"), dict):
        raise ConfigError(f"{path}: expected a mapping with an 'experiments' mapping at the top")
    experiments = {}
    for name, body in raw["experiments"].items():
        try:
            experiment = Experiment.model_validate(body or {})
        except ValidationError as error:
            raise ConfigError(f"{path}: experiment {name!r}: {one_line(error)}") from None
        try:
            experiment.check_values()
        except ConfigError as error:
            raise ConfigError(f"{path}: experiment {name!r}: {error}") from None
        experiments[name] = experiment
    return experiments


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"rollout": {"prompts": 8}}`` -> ``{"rollout.prompts": 8}`` (env options stay
    one value each)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out |= _flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _covers(setting: str, axis: str) -> bool:
    return axis == setting or axis.startswith(setting + ".")


def _drop(variant: dict[str, Any], setting: str) -> dict[str, Any]:
    flat = {k: v for k, v in _flatten(variant).items() if not _covers(setting, k)}
    out: dict[str, Any] = {}
    for path, value in flat.items():
        assign(out, path, value)
    return out

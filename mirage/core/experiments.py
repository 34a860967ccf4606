"""``registry.yaml``: named experiments as grids over the typed RunConfig.

Each experiment has a partial ``base`` config, ``grid`` axes (dotted config paths ->
values) and replicate ``seeds``; its cells are every combination of axis values and
seeds. Loading validates every cell, so a malformed file fails before anything runs.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mirage.core.config import RunConfig
from mirage.core.validate import ConfigError, build_config, one_line


class Experiment(BaseModel):
    """One named grid."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    seeds: list[int] = Field(default_factory=lambda: [0])

    def cells(self) -> list[tuple[dict[str, Any], RunConfig]]:
        """(axis values, config) for every grid point and seed."""
        axes = list(self.grid)
        out = []
        for values in itertools.product(*(self.grid[a] for a in axes)):
            for seed in self.seeds:
                point = dict(zip(axes, values)) | {"seed": seed}
                data = _deep_copy(self.base)
                for path, value in point.items():
                    _assign(data, path, value)
                out.append((point, build_config(data)))
        return out


def default_registry_path() -> Path:
    if env := os.environ.get("MIRAGE_REGISTRY"):
        return Path(env)
    local = Path("registry.yaml")
    return local if local.exists() else Path(__file__).resolve().parents[2] / "registry.yaml"


def load_registry(path: Path | None = None) -> dict[str, Experiment]:
    """Parse and validate every experiment; raise ConfigError naming what is wrong."""
    path = path or default_registry_path()
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"registry file {str(path)!r} does not exist") from None
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
            experiment.cells()
        except ConfigError as error:
            raise ConfigError(f"{path}: experiment {name!r}: {error}") from None
        experiments[name] = experiment
    return experiments


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in data.items()}


def _assign(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        data = data.setdefault(part, {})
        if not isinstance(data, dict):
            raise ConfigError(f"grid axis {path!r} goes through a non-mapping value")
    data[leaf] = value

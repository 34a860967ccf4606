"""A run's context: its config and the components it selected from the registries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mirage.core.backend import Backend
from mirage.core.config import RunConfig
from mirage.core.env import Environment
from mirage.core.plugins import Plugins


@dataclass
class RunSession:
    """Everything a stage hook may need. Built by :func:`mirage.core.loop.open_session`."""

    config: RunConfig
    plugins: Plugins
    env_cls: type[Environment]
    env_options: Any
    backend: Backend
    algorithm: Any
    filter: Any
    diagnostics: dict[str, Any]
    # the run's logger components by name; the built-in loggers plugin drops one that raises
    loggers: dict[str, Any] = field(default_factory=dict)
    step: int = 0
    state: dict[str, Any] = field(default_factory=dict)  # plugin state saved in checkpoints
    # (kind, message) pairs a stage raised this step (the collapse alarm's, say); the loop
    # writes each to the store's events table, shows it on the progress line and clears them.
    notices: list[tuple[str, str]] = field(default_factory=list)

    @property
    def hook(self) -> Any:
        return self.plugins.hook

    def make_env(self) -> Environment:
        return self.env_cls(self.env_options)

"""A run's context: its config and the components it selected from the registries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mirage.core.config.run_config import RunConfig
from mirage.core.parallel.world import World
from mirage.core.plugin_api.loaded_plugins import Plugins
from mirage.core.rl.backend import Backend
from mirage.core.rl.env import Environment


@dataclass
class RunSession:
    """Everything a stage hook may need. Built by :func:`mirage.core.run.loop.open_session`."""

    config: RunConfig
    """The resolved run config (``run.config.filter``, ``run.config.env``, ...)."""
    plugins: Plugins
    """The plugin manager and the component registries."""
    env_cls: type[Environment]
    """The selected environment class."""
    env_options: Any
    """The environment's validated ``Options`` instance."""
    backend: Backend
    """The policy: ``encode``, ``decode``, ``generate`` and the update's model."""
    algorithm: Any
    """The selected update algorithm component."""
    filter: Any
    """The selected filter component (its shared settings are ``config.filter``)."""
    diagnostics: dict[str, Any]
    """The run's diagnostic components by name."""
    loggers: dict[str, Any] = field(default_factory=dict)
    """The run's logger components by name; the built-in loggers plugin drops one that raises."""
    step: int = 0
    """The current iteration."""
    state: dict[str, Any] = field(default_factory=dict)
    """Plugin state saved in checkpoints (restored on resume)."""
    world: World = field(default_factory=World)
    """The processes of a data-parallel run (``model.parallel``): every rank runs the same
    stages on the same batch, splitting the work (mirage/core/parallel/world.py); only the
    main rank stores, logs and checkpoints. A one-process run has a world of one."""
    notices: list[tuple[str, str]] = field(default_factory=list)
    """(kind, message) pairs a stage raised this step (the collapse alarm's, say); the loop
    writes each to the store's events table, shows it on the progress line and clears them."""

    @property
    def hook(self) -> Any:
        """The plugin manager's hook caller: ``run.hook.mirage_score(run=run, ...)``."""
        return self.plugins.hook

    def make_env(self) -> Environment:
        """A fresh environment instance with the run's options."""
        return self.env_cls(self.env_options)

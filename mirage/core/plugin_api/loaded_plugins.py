"""What a built plugin manager holds: the manager, its filled registries and a record of
each loaded plugin. Built by :func:`mirage.core.plugin_api.manager.build_plugins`; kept apart from it
so that the run session (and through it the hook specifications) can name these types
without importing the builder, which imports the hook specifications."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pluggy

from mirage.core.plugin_api.failures import PluginFailure
from mirage.core.plugin_api.registry import Registries
from mirage.core.plugin_api.version import GENERATION


@dataclass
class PluginInfo:
    """One loaded plugin: where it came from and what it contributes."""

    name: str
    version: str
    builtin: bool
    hooks: list[str] = field(default_factory=list)
    components: dict[str, list[str]] = field(default_factory=dict)
    api: int = GENERATION
    """The plugin API major version it was written for (mirage/core/plugin_api/legacy.py)."""
    deprecated: str | None = None
    """Its deprecation notice: old import paths or constructors it still uses."""

    def as_record(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}


@dataclass
class Plugins:
    """A plugin manager with its filled registries and a record of what was loaded."""

    manager: pluggy.PluginManager
    registries: Registries
    infos: list[PluginInfo]
    failed: list[PluginFailure] = field(default_factory=list)
    """Third-party plugins set aside (mirage/core/plugin_api/failures.py); not in ``infos``."""

    @property
    def hook(self) -> Any:
        return self.manager.hook

    def records(self) -> list[dict[str, Any]]:
        return [info.as_record() for info in self.infos]

    def set_aside(self, name: str, place: str, rule: str) -> PluginFailure:
        """Set aside the loaded third-party plugin ``name`` after the fact (its command hook
        broke the contract): unregistered, out of ``infos``, its failure in ``failed``."""
        info = self.info(name)
        others = [i.name for i in self.infos if not i.builtin and i.name != name]
        self.manager.unregister(name=name)
        self.infos.remove(info)
        failure = PluginFailure(name, f"{name} {info.version}", place, rule, info.components, others)
        self.failed.append(failure)
        self.registries.set_aside(failure.line(), {})
        return failure

    def info(self, name: str) -> PluginInfo:
        for info in self.infos:
            if info.name == name:
                return info
        raise KeyError(name)

"""What a built plugin manager holds: the manager, its filled registries and a record of
each loaded plugin. Built by :func:`mirage.core.plugins.build_plugins`; kept apart from it
so that the run session (and through it the hook specifications) can name these types
without importing the builder, which imports the hook specifications."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pluggy

from mirage.core.registry import Registries


@dataclass
class PluginInfo:
    """One loaded plugin: where it came from and what it contributes."""

    name: str
    version: str
    builtin: bool
    hooks: list[str] = field(default_factory=list)
    components: dict[str, list[str]] = field(default_factory=dict)

    def as_record(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}


@dataclass
class Plugins:
    """A plugin manager with its filled registries and a record of what was loaded."""

    manager: pluggy.PluginManager
    registries: Registries
    infos: list[PluginInfo]

    @property
    def hook(self) -> Any:
        return self.manager.hook

    def records(self) -> list[dict[str, Any]]:
        return [info.as_record() for info in self.infos]

    def info(self, name: str) -> PluginInfo:
        for info in self.infos:
            if info.name == name:
                return info
        raise KeyError(name)

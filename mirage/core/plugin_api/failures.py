"""Plugins that break the contract are set aside, not fatal.

A third-party plugin whose import, registration with the plugin manager or component
registration raises, or that registers something a registry refuses (a class that does
not subclass the kind's base, a name already taken, a bad name), is set aside whole:
none of its components are registered and none of its hooks run (all or nothing: a
plugin that failed halfway keeps nothing, so a run never mixes half a plugin with the
rest). The failure is one line naming the plugin, its distribution and version, the file
and line, the rule it broke and how to fix or leave it out; the ``core`` program prints
it once on stderr, ``core plugins`` lists it, a run that asks for one of its components
fails before any work with that line, and every other run records it in its events
(kind ``plugin_set_aside``). Built-in plugins are never set aside: a broken built-in is
MIRAGE's bug, and it raises.
"""

from __future__ import annotations

import inspect
import os
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

EVENT_KIND = "plugin_set_aside"


@dataclass
class PluginFailure:
    """A third-party plugin that was set aside, and why."""

    name: str
    distribution: str  # "mirage-ducktyped 0.1.0", or "unknown" for a plugin passed in
    place: str  # "file:line", or "" where none is known
    rule: str  # what it broke
    components: dict[str, list[str]] = field(default_factory=dict)  # what it tried to register
    others: list[str] = field(default_factory=list)  # the entry points still loaded

    def line(self) -> str:
        where = ", ".join(p for p in (self.distribution, self.place) if p)
        return (f"plugin {self.name!r} ({where}) was set aside: {self.rule}; fix it, or leave "
                f"it out with {self._leave_out()}")

    def _leave_out(self) -> str:
        allow = f"MIRAGE_PLUGINS={','.join(self.others)}" if self.others else "MIRAGE_DISABLE_PLUGIN_AUTOLOAD=1"
        dist = self.distribution.split(" ")[0]
        return allow + (f" or `pip uninstall {dist}`" if dist != "unknown" else "")


def distribution_of(ep: metadata.EntryPoint | None) -> str:
    dist = getattr(ep, "dist", None) if ep is not None else None
    return f"{dist.name} {dist.version}" if dist is not None else "unknown"


def raised_at(error: BaseException) -> str:
    """``file:line`` of the deepest frame of ``error`` outside MIRAGE and the standard
    importing machinery (the plugin's own line, for an exception it raised)."""
    if isinstance(error, SyntaxError) and error.filename:
        return f"{error.filename}:{error.lineno or 0}"
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the mirage package
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        path = os.path.abspath(frame.filename)
        if not path.startswith(here) and "importlib" not in path and "<frozen" not in frame.filename:
            return f"{frame.filename}:{frame.lineno or 0}"
    return f"{frames[-1].filename}:{frames[-1].lineno or 0}" if frames else ""


def defined_at(obj: Any) -> str:
    """``file:line`` where a class or function is defined ("" if unknown)."""
    try:
        target = obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj)
        return f"{inspect.getsourcefile(target)}:{inspect.getsourcelines(target)[1]}"
    except (OSError, TypeError):
        return ""

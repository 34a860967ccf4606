"""Builds the plugin manager: built-in plugins first, then third-party entry points.

Third-party packages declare ``[project.entry-points.mirage] name = "module"``.
Two environment variables make runs reproducible:

* ``MIRAGE_PLUGINS`` - comma-separated allowlist of entry-point names to load
  (unset: load all installed ones);
* ``MIRAGE_DISABLE_PLUGIN_AUTOLOAD=1`` - load no entry points at all, built-ins only.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from importlib import metadata

import pluggy

from mirage.core import hookspecs
from mirage.core.loaded_plugins import PluginInfo, Plugins
from mirage.core.registry import KINDS, Registries

ENTRY_POINT_GROUP = "mirage"
ALLOWLIST_ENV = "MIRAGE_PLUGINS"
KILL_SWITCH_ENV = "MIRAGE_DISABLE_PLUGIN_AUTOLOAD"

DEFAULT_PLUGINS = (
    "mirage.plugins.stages",
    "mirage.plugins.rollout",
    "mirage.envs.plugin",
    "mirage.plugins.backend_local.plugin",
    "mirage.plugins.backend_vllm.plugin",
    "mirage.plugins.verl_algorithms.register",
    "mirage.plugins.filters",
    "mirage.plugins.diagnostics",
    "mirage.plugins.loggers",
)


def _mirage_version() -> str:
    try:
        return metadata.version("mirage-rl")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _third_party_entry_points() -> list[metadata.EntryPoint]:
    if os.environ.get(KILL_SWITCH_ENV, "").strip() not in ("", "0"):
        return []
    allow = os.environ.get(ALLOWLIST_ENV)
    allowed = None if allow is None else {n.strip() for n in allow.split(",") if n.strip()}
    found = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
    return [ep for ep in found if allowed is None or ep.name in allowed]


def build_plugins(extra: Sequence[tuple[str, object]] = (),
                  builtins: Sequence[str] = DEFAULT_PLUGINS) -> Plugins:
    """Create a manager, load the ``builtins`` modules (a run's: ``DEFAULT_PLUGINS``; the
    ``core`` program passes its command plugins, :mod:`mirage.builtins`), entry points
    and ``extra`` (name, plugin) pairs, then run the registration hooks. No work happens
    at import time."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    version = _mirage_version()
    for module_name in builtins:
        module = importlib.import_module(module_name)
        manager.register(module, name=module_name)
        infos.append(PluginInfo(module_name, version, builtin=True))
    for ep in _third_party_entry_points():
        plugin = ep.load()
        manager.register(plugin, name=ep.name)
        dist = ep.dist
        infos.append(PluginInfo(ep.name, dist.version if dist else "unknown", builtin=False))
    for name, plugin in extra:
        manager.register(plugin, name=name)
        infos.append(PluginInfo(name, getattr(plugin, "__version__", "unknown"), builtin=False))

    registries = Registries()
    by_name = {info.name: info for info in infos}
    for info in infos:
        plugin = manager.get_plugin(info.name)
        info.hooks = sorted(
            caller.name for caller in manager.get_hookcallers(plugin) or []
        )
    for kind in KINDS:
        _run_registration(manager, registries, kind, by_name)
    return Plugins(manager, registries, infos)


def _run_registration(
    manager: pluggy.PluginManager, registries: Registries, kind: str, by_name: dict
) -> None:
    """Call one registration hook plugin by plugin so each name knows its owner."""
    caller = getattr(manager.hook, f"mirage_register_{kind}")
    registry = registries.of(kind)
    for impl in caller.get_hookimpls():
        owner = impl.plugin_name

        def register(name: str, component: object, _owner: str = owner) -> None:
            registry.register(name, component, owner=_owner)
            by_name[_owner].components.setdefault(kind, []).append(name)

        impl.function(register=register)


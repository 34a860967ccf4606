"""Builds the plugin manager: built-in plugins first, then third-party entry points.

Third-party packages declare ``[project.entry-points.mirage] name = "module"``.
Two environment variables make runs reproducible:

* ``MIRAGE_PLUGINS`` - comma-separated allowlist of entry-point names to load
  (unset: load all installed ones);
* ``MIRAGE_DISABLE_PLUGIN_AUTOLOAD=1`` - load no entry points at all, built-ins only.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import pluggy

from mirage.core import hookspecs
from mirage.core.loaded_plugins import PluginInfo, Plugins
from mirage.core.plugin_failures import PluginFailure, defined_at, distribution_of, raised_at
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


# Plugins the ``core`` program set aside when their command hook broke the contract
# (:func:`mirage.core.cli.build_cli`): every later build in this process leaves them out
# whole, so a run never uses the components of a plugin the program set aside.
_SET_ASIDE: dict[str, PluginFailure] = {}


def set_aside_in_this_process(failure: PluginFailure) -> None:
    _SET_ASIDE[failure.name] = failure


def build_plugins(extra: Sequence[tuple[str, object]] = (),
                  builtins: Sequence[str] = DEFAULT_PLUGINS) -> Plugins:
    """Create a manager, load the ``builtins`` modules (a run's: ``DEFAULT_PLUGINS``; the
    ``core`` program passes its command plugins, :mod:`mirage.builtins`), entry points
    and ``extra`` (name, plugin) pairs, then run the registration hooks. No work happens
    at import time. A third-party plugin (an entry point or an ``extra`` one) that breaks
    the contract is set aside whole and listed in ``Plugins.failed``
    (mirage/core/plugin_failures.py); a broken built-in raises."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    failed: list[PluginFailure] = []
    entry_points = {}
    version = _mirage_version()
    for module_name in builtins:
        module = importlib.import_module(module_name)
        manager.register(module, name=module_name)
        infos.append(PluginInfo(module_name, version, builtin=True))
    candidates: list[tuple[str, Any, str]] = []  # (name, a loader or the plugin, distribution)
    for ep in _third_party_entry_points():
        entry_points[ep.name] = ep
        candidates.append((ep.name, ep.load, distribution_of(ep)))
    candidates += [(name, lambda plugin=plugin: plugin, "unknown") for name, plugin in extra]
    for name, load, dist in candidates:
        if name in _SET_ASIDE:
            failed.append(dataclasses.replace(_SET_ASIDE[name]))
            continue
        try:
            plugin = load()
            manager.register(plugin, name=name)
        except Exception as error:  # noqa: BLE001 - any failure sets the plugin aside
            failed.append(PluginFailure(name, dist, raised_at(error),
                                        f"loading it raised {type(error).__name__}: {error}"))
            continue
        ep = entry_points.get(name)
        if ep is None:  # passed in: its own __version__, if it has one
            plugin_version = getattr(plugin, "__version__", "unknown")
        else:
            plugin_version = ep.dist.version if ep.dist else "unknown"
        infos.append(PluginInfo(name, plugin_version, builtin=False))

    registries = Registries()
    for info in infos:
        plugin = manager.get_plugin(info.name)
        info.hooks = sorted(caller.name for caller in manager.get_hookcallers(plugin) or [])
    for info in list(infos):
        failure = _register_components(manager, registries, info)
        if failure is not None:
            failure.distribution = distribution_of(entry_points.get(info.name))
            if failure.distribution == "unknown" and info.version != "unknown":
                failure.distribution = f"{info.name} {info.version}"
            manager.unregister(name=info.name)  # none of its hooks run either
            infos.remove(info)
            failed.append(failure)
    loaded = sorted(name for name in entry_points if name not in {f.name for f in failed})
    for failure in failed:
        failure.others = loaded
        registries.set_aside(failure.line(), failure.components)
    return Plugins(manager, registries, infos, failed)


def _register_components(manager: pluggy.PluginManager, registries: Registries,
                         info: PluginInfo) -> PluginFailure | None:
    """Call ``info``'s registration hooks, kind by kind, and register every component it
    names, or none (returning why) when one hook raises or one component is refused.
    A built-in's failure raises: it is MIRAGE's own bug."""
    staged: list[tuple[str, object, object, Any]] = []  # (kind, name, component, impl)
    for kind in KINDS:
        caller = getattr(manager.hook, f"mirage_register_{kind}")
        for impl in caller.get_hookimpls():
            if impl.plugin_name != info.name:
                continue
            try:
                impl.function(register=lambda name, component, _kind=kind, _impl=impl:
                              staged.append((_kind, name, component, _impl)))
            except Exception as error:  # noqa: BLE001
                if info.builtin:
                    raise
                return PluginFailure(info.name, "", raised_at(error),
                                     f"mirage_register_{kind} raised {type(error).__name__}: {error}",
                                     _names(staged))
    taken: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
    for kind, name, component, impl in staged:
        problem = registries.of(kind).problem(name, component, info.name, taken[kind])
        if problem is not None:
            if info.builtin:
                raise ValueError(problem)
            place = defined_at(component) if problem.endswith(f"got {component!r}") else ""
            return PluginFailure(info.name, "", place or defined_at(impl.function), problem,
                                 _names(staged))
        taken[kind][name] = info.name
    for kind, name, component, _ in staged:
        registries.of(kind).register(name, component, owner=info.name)
        info.components.setdefault(kind, []).append(name)
    return None


def _names(staged: list[tuple[str, object, object, Any]]) -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for kind, name, _, _ in staged:
        names.setdefault(kind, []).append(name)
    return names

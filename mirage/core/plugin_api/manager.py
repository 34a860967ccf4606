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
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pluggy
from pluggy import HookImpl

from mirage.core.plugin_api import hookspecs, legacy
from mirage.core.plugin_api.failures import PluginFailure, defined_at, distribution_of, raised_at
from mirage.core.plugin_api.hook_calls import raising_impl, running_impl
from mirage.core.plugin_api.loaded_plugins import PluginInfo, Plugins
from mirage.moved_paths import MirageDeprecationWarning, held_back
from mirage.core.plugin_api.registry import KINDS, Registries
from mirage.core.plugin_api.version import IncompatiblePlugin, declared_generation, mirage_version

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


def _third_party_entry_points() -> list[metadata.EntryPoint]:
    if os.environ.get(KILL_SWITCH_ENV, "").strip() not in ("", "0"):
        return []
    allow = os.environ.get(ALLOWLIST_ENV)
    allowed = None if allow is None else {n.strip() for n in allow.split(",") if n.strip()}
    found = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
    return [ep for ep in found if allowed is None or ep.name in allowed]


# Plugins the ``core`` program set aside when their command hook broke the contract
# (:func:`mirage.core.cli.program.build_cli`): every later build in this process leaves them out
# whole, so a run never uses the components of a plugin the program set aside.
_SET_ASIDE: dict[str, PluginFailure] = {}


shown_notices: set[str] = set()
"""The plugins' deprecation notices already warned in this process (each is warned once;
``core plugins`` and ``PluginInfo.deprecated`` keep showing them)."""


def set_aside_in_this_process(failure: PluginFailure) -> None:
    _SET_ASIDE[failure.name] = failure


def build_plugins(extra: Sequence[tuple[str, object]] = (),
                  builtins: Sequence[str] = DEFAULT_PLUGINS) -> Plugins:
    """Create a manager, load the ``builtins`` modules (a run's: ``DEFAULT_PLUGINS``; the
    ``core`` program passes its command plugins, :mod:`mirage.builtins`), entry points
    and ``extra`` (name, plugin) pairs, then run the registration hooks. No work happens
    at import time. A third-party plugin (an entry point or an ``extra`` one) that breaks
    the contract is set aside whole and listed in ``Plugins.failed``
    (mirage/core/plugin_api/failures.py); a broken built-in raises."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    failed: list[PluginFailure] = []
    entry_points = {}
    version = mirage_version()
    for module_name in builtins:
        module = importlib.import_module(module_name)
        manager.register(module, name=module_name)
        infos.append(PluginInfo(module_name, version, builtin=True))
    candidates: list[tuple[str, Any, str]] = []  # (name, a loader or the plugin, distribution)
    for ep in _third_party_entry_points():
        entry_points[ep.name] = ep
        candidates.append((ep.name, ep.load, distribution_of(ep)))
    candidates += [(name, lambda plugin=plugin: plugin, "unknown") for name, plugin in extra]
    generations: dict[str, int] = {}
    for name, load, dist in candidates:
        if name in _SET_ASIDE:
            failed.append(dataclasses.replace(_SET_ASIDE[name]))
            continue
        try:
            with held_back():
                plugin = load()
            ep = entry_points.get(name)
            declared = declared_generation(plugin, ep.dist if ep is not None else None)
            manager.register(plugin, name=name)
        except IncompatiblePlugin as error:
            failed.append(PluginFailure(name, dist, "", str(error)))
            continue
        except Exception as error:  # noqa: BLE001 - any failure sets the plugin aside
            failed.append(PluginFailure(name, dist, raised_at(error),
                                        f"loading it raised {type(error).__name__}: {error}"))
            continue
        scan = legacy.scan_imports(plugin)
        generations[name] = declared if declared is not None else legacy.inferred_generation(scan)
        deprecated = legacy.notice(name, scan, generations[name])
        if deprecated is not None and deprecated not in shown_notices:  # once per process
            shown_notices.add(deprecated)
            warnings.warn_explicit(deprecated, MirageDeprecationWarning, *legacy.first_use(scan, plugin))
        ep = entry_points.get(name)
        if ep is None:  # passed in: its own __version__, if it has one
            plugin_version = getattr(plugin, "__version__", "unknown")
        else:
            plugin_version = ep.dist.version if ep.dist else "unknown"
        infos.append(PluginInfo(name, plugin_version, builtin=False, api=generations[name],
                                deprecated=deprecated))

    for info in infos:
        plugin = manager.get_plugin(info.name)
        info.hooks = sorted(caller.name for caller in manager.get_hookcallers(plugin) or [])
    registries, set_aside = _register_components(manager, infos)
    for failure in set_aside:
        if failure.name in entry_points:
            failure.distribution = distribution_of(entry_points[failure.name])
    failed += set_aside
    loaded = sorted(name for name in entry_points if name not in {f.name for f in failed})
    for failure in failed:
        failure.others = loaded
        registries.set_aside(failure.line(), failure.components)
    return Plugins(manager, registries, infos, failed)


@dataclass(frozen=True)
class _Staged:
    """One ``register(name, component)`` call, by the implementation that made it."""

    kind: str
    name: object
    component: object
    impl: HookImpl


@dataclass(frozen=True)
class _Raised:
    """A registration hook call that raised, and the implementation whose code raised."""

    kind: str
    error: Exception
    impl: HookImpl | None


def _register_components(manager: pluggy.PluginManager,
                         infos: list[PluginInfo]) -> tuple[Registries, list[PluginFailure]]:
    """Call the registration hooks through pluggy (wrappers included, in pluggy's order),
    then register each plugin's components, plugin by plugin in load order, all or none.
    A third-party plugin whose hook raises or whose component a registry refuses is set
    aside (unregistered, out of ``infos``, its failure returned) and the hooks are called
    again without it, into fresh registries. A built-in's failure raises: it is MIRAGE's bug."""
    failures: list[PluginFailure] = []
    while True:
        staged, raised = _staged_registrations(manager)
        registries = Registries()
        failure = _raised_failure(infos, staged, raised) if raised else _fill(registries, infos, staged)
        if failure is None:
            return registries, failures
        manager.unregister(name=failure.name)  # none of its hooks run either
        infos.remove(_info_named(infos, failure.name))
        failures.append(failure)


def _staged_registrations(manager: pluggy.PluginManager) -> tuple[list[_Staged], _Raised | None]:
    """Every registration, from one pluggy call of each registration hook in turn, each
    attributed to the implementation that made it; where a call raised, those before it."""
    staged: list[_Staged] = []
    for kind in KINDS:
        caller = getattr(manager.hook, f"mirage_register_{kind}")
        impls = caller.get_hookimpls()
        try:
            caller(register=_stager(kind, impls, staged))
        except Exception as error:  # noqa: BLE001 - the plugin that raised is set aside
            return staged, _Raised(kind, error, raising_impl(error, impls))
    return staged, None


def _stager(kind: str, impls: list[HookImpl], staged: list[_Staged]) -> hookspecs.Register:
    """The ``register`` the hook receives: it stages each registration under the
    implementation making it."""

    def register(name: object, component: object) -> None:
        impl = running_impl(impls)
        if impl is None:
            raise RuntimeError(f"register({name!r}, ...) called outside mirage_register_{kind}")
        staged.append(_Staged(kind, name, component, impl))

    return register


def _raised_failure(infos: list[PluginInfo], staged: list[_Staged], raised: _Raised) -> PluginFailure:
    """The failure of the third-party plugin whose implementation raised; a built-in's
    error, or one raised by no implementation, raises again."""
    info = None if raised.impl is None else _info_named(infos, raised.impl.plugin_name)
    if info is None or info.builtin:
        raise raised.error
    error = raised.error
    return PluginFailure(info.name, _distribution(info), raised_at(error),
                         f"mirage_register_{raised.kind} raised {type(error).__name__}: {error}",
                         _names(staged, info.name))


def _fill(registries: Registries, infos: list[PluginInfo], staged: list[_Staged]) -> PluginFailure | None:
    """Register each plugin's components in load order; the first third-party plugin a
    registry refuses stops it (returned); a built-in's refusal raises."""
    for info in infos:
        own = [entry for entry in staged if entry.impl.plugin_name == info.name]
        taken: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        for entry in own:
            problem = registries.of(entry.kind).problem(entry.name, entry.component, info.name,
                                                        taken[entry.kind], generation=info.api)
            if problem is None:
                taken[entry.kind][entry.name] = info.name
                continue
            if info.builtin:
                raise ValueError(problem)
            place = defined_at(entry.component) if problem.endswith(f"got {entry.component!r}") else ""
            return PluginFailure(info.name, _distribution(info), place or defined_at(entry.impl.function),
                                 problem, _names(own, info.name))
        info.components = {}
        for entry in own:
            registries.of(entry.kind).register(entry.name, entry.component, owner=info.name,
                                               generation=info.api)
            info.components.setdefault(entry.kind, []).append(entry.name)
    return None


def _names(staged: list[_Staged], plugin: str) -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for entry in staged:
        if entry.impl.plugin_name == plugin:
            names.setdefault(entry.kind, []).append(entry.name)
    return names


def _distribution(info: PluginInfo) -> str:
    """What a plugin passed in is known as (an entry point's distribution replaces it)."""
    return f"{info.name} {info.version}" if info.version != "unknown" else "unknown"


def _info_named(infos: list[PluginInfo], name: str) -> PluginInfo:
    return next(info for info in infos if info.name == name)

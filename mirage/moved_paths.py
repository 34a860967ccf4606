"""Module paths of earlier releases, kept importable for a stated period.

Until 4 December 2026 (plugin API 1) core was flat: plugin authors were told to import
``mirage.core.batch``, ``mirage.core.components``, ``mirage.core.hookspecs``,
``mirage.core.env`` and so on. Those modules moved into core's folders (plugin API 2) and
today's authors import :mod:`mirage.plugin` instead. :data:`MOVED` maps every old flat
path to the module that holds its code now; :class:`MovedFinder` (installed by
``mirage/core/__init__.py``, so it is there before any ``mirage.core.*`` import) makes ``import mirage.core.batch`` return that module itself (the same
objects, no copy) with a :class:`MirageDeprecationWarning` naming the public import. Two
old paths are packages today (``mirage.core.config``, ``mirage.core.store``): their
``__init__`` serves the old names through :func:`old_name`.

Only the standard library is imported here: it is loaded with ``mirage.core``. It sits
outside core's folders because both core's lowest floor (``config``, ``store``) and the
plugin manager read it."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from typing import Any

REMOVED_IN = "0.4.0"
"""The release that drops these paths (docs/plugin-api.md, "Deprecations")."""

MOVED: dict[str, str] = {f"mirage.core.{old}": f"mirage.core.{new}" for old, new in {
    "backend": "rl.backend", "batch": "rl.batch", "demos": "rl.demos", "env": "rl.env",
    "episode": "rl.episode", "policy_output": "rl.policy_output", "returns": "rl.returns",
    "training": "rl.training",
    "components": "plugin_api.components", "hookspecs": "plugin_api.hookspecs",
    "loaded_plugins": "plugin_api.loaded_plugins", "registry": "plugin_api.registry",
    "session": "plugin_api.session", "plugins": "plugin_api.manager",
    "plugin_errors": "plugin_api.failures", "plugin_results": "plugin_api.results",
    "options": "config.options", "presets": "config.presets", "nested": "config.nested",
    "overrides": "config.overrides", "paths": "config.paths",
    "loop": "run.loop", "validate": "run.validate", "preflight": "run.preflight",
    "progress": "run.progress", "run_hooks": "run.run_hooks", "scoring": "run.scoring",
    "threads": "run.threads", "experiments": "run.experiments", "run_records": "run.records",
    "heartbeat": "store.heartbeat", "run_index": "store.run_index", "store_file": "store.file",
    "store_migrations": "store.migrations", "store_rollouts": "store.rollouts",
    "run_export": "store.export",
    "ceiling": "analysis.ceiling", "correlation": "analysis.correlation",
    "cli_common": "cli.common", "run_commands": "cli.run_commands",
}.items()}

OLD_PACKAGE_NAMES: dict[str, dict[str, str]] = {
    # the flat ``config.py`` and ``store.py`` of plugin API 1, now packages: name -> module
    "mirage.core.config": {name: "mirage.core.config.run_config" for name in (
        "RunConfig", "EnvConfig", "ModelConfig", "RolloutConfig", "FilterConfig", "AlgorithmConfig",
        "DiagnosticsConfig", "ValidationConfig", "LoggersConfig")},
    "mirage.core.store": {"RunStore": "mirage.core.store.run_store", "GroupRow": "mirage.core.store.run_store"},
}


class MirageDeprecationWarning(DeprecationWarning):
    """A plugin uses a path or a shape that MIRAGE keeps working until :data:`REMOVED_IN`."""


PUBLIC_MODULES = ("mirage.plugin", "mirage.plugin.testing")


def public_home(module: str, name: str | None = None) -> str:
    """The public import of ``name`` (or of the names ``module`` holds): from
    ``mirage.plugin`` or ``mirage.plugin.testing``."""
    found: list[tuple[str, str]] = []
    for public_name in PUBLIC_MODULES:
        try:
            public = importlib.import_module(public_name)
        except Exception:  # noqa: BLE001 - a warning must never fail an import
            continue
        for exported in public.__all__:
            value = getattr(public, exported)
            if (exported == name if name else getattr(value, "__module__", None) == module):
                found.append((public_name, exported))
    if not found:
        return "mirage.plugin (components, data, hooks) or mirage.plugin.testing (tests' helpers)"
    by_module: dict[str, list[str]] = {}
    for public_name, exported in found:
        by_module.setdefault(public_name, []).append(exported)
    return "; ".join(f"from {m} import {', '.join(names)}" for m, names in by_module.items())


def deprecation(old: str, new: str, name: str | None = None) -> str:
    return (f"{old} is deprecated and goes in mirage-rl {REMOVED_IN}: use {public_home(new, name)} "
            "(docs/plugin-api.md)")


_held_back = False  # True while a plugin loads: its one notice names these paths instead


class held_back:
    """While a plugin loads, the old paths it imports do not warn one by one: the plugin
    gets one notice naming them all (mirage/core/plugin_api/legacy.py)."""

    def __enter__(self) -> None:
        global _held_back
        self.before, _held_back = _held_back, True

    def __exit__(self, *exc: object) -> None:
        global _held_back
        _held_back = self.before


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):  # a plain placeholder; exec_module swaps in the real one
        return None

    def exec_module(self, module) -> None:
        real = importlib.import_module(self.target)
        if not _held_back:  # level 2 is the import statement: warnings skips importlib's frames
            warnings.warn(deprecation(module.__name__, self.target), MirageDeprecationWarning, stacklevel=2)
        sys.modules[module.__name__] = real  # the import statement returns this module


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old flat paths of :data:`MOVED` and nothing else."""

    def find_spec(self, fullname: str, path: Any, target: Any = None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(MOVED[fullname]))


def install() -> None:
    """Put :class:`MovedFinder` on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedFinder())


def old_name(package: str, name: str) -> Any:
    """A name the flat module ``package`` of plugin API 1 held (its package's
    ``__getattr__``), with the deprecation warning."""
    module = OLD_PACKAGE_NAMES.get(package, {}).get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    warnings.warn(deprecation(f"{package}.{name}", module, name), MirageDeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(module), name)

"""Plugins written for earlier plugin APIs: what they import, which shapes they expect,
and the one deprecation notice each gets when it loads.

A plugin's *generation* is the major plugin API it was written for: its declaration
(mirage/core/plugin_api/version.py) when it has one, else read from its imports — a
plugin that imports a flat ``mirage.core.*`` path of 4 December 2026
(mirage/moved_paths.py) expects that release's constructors (generation 1),
any other expects today's (generation 2). :func:`build_legacy` builds a generation-1
component the way that release did, so its code runs unchanged:

========== ============================ ===========================
kind       generation 1 (4 December)    generation 2 (today)
========== ============================ ===========================
filter     ``cls(config.filter)``       ``cls(config, options)``
algorithm  ``cls(config)``              ``cls(config, options)``
diagnostic ``cls(config)``              ``cls(config, options)``
backend    ``cls(config)``              ``cls(config, options)``
logger     ``cls(options)``             ``cls(config, options)``
========== ============================ ===========================

Estimators and environments were built the same way in both."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from mirage.core.plugin_api.version import GENERATION
from mirage.moved_paths import MOVED, OLD_PACKAGE_NAMES, PUBLIC_MODULES, REMOVED_IN


@dataclass
class ImportScan:
    """The mirage imports of a plugin's own source files that are not public."""

    old: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Flat paths of plugin API 1 -> where first imported (file, line)."""
    deep: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Other internal paths (today's deep modules) -> where first imported."""


def _own_files(plugin: object) -> list[Path]:
    """The source files of the package the plugin object comes from."""
    module_name = plugin.__name__ if isinstance(plugin, ModuleType) else type(plugin).__module__
    top = (module_name or "").split(".")[0]
    if not top or top == "mirage":
        return []
    files = []
    for name, module in list(sys.modules.items()):
        if name == top or name.startswith(top + "."):
            path = getattr(module, "__file__", None)
            if path and path.endswith(".py"):
                files.append(Path(path))
    return sorted(set(files))


def _is_public(module: str) -> bool:
    return module == "mirage" or any(module == p or module.startswith(p + ".") for p in PUBLIC_MODULES)


def scan_imports(plugin: object) -> ImportScan:
    """Every ``import mirage...`` / ``from mirage... import`` in the plugin's own files
    that names an old flat path or an internal module."""
    scan = ImportScan()
    for path in _own_files(plugin):
        try:
            tree = ast.parse(path.read_text(), str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
                names += [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MOVED]
            else:
                continue
            for module in names:
                if not module.startswith("mirage.") or _is_public(module):
                    continue
                where = (str(path), node.lineno)
                old = module in MOVED or (isinstance(node, ast.ImportFrom) and module in OLD_PACKAGE_NAMES
                                          and any(a.name in OLD_PACKAGE_NAMES[module] for a in node.names))
                (scan.old if old else scan.deep).setdefault(module, where)
    return scan


def first_use(scan: ImportScan, plugin: object) -> tuple[str, int]:
    """(file, line) a plugin's deprecation notice points at: its first old or internal
    import, else the plugin's own module."""
    found = [*scan.old.values(), *scan.deep.values()]
    return found[0] if found else (getattr(plugin, "__file__", None) or "<plugin>", 1)


def inferred_generation(scan: ImportScan) -> int:
    return 1 if scan.old else GENERATION


def notice(plugin_name: str, scan: ImportScan, generation: int) -> str | None:
    """The one deprecation line a plugin gets, or None for a plugin on today's API that
    imports only public paths."""
    parts = []
    if scan.old or scan.deep:
        paths = ", ".join(f"{m} ({Path(file).name}:{line})"
                          for m, (file, line) in [*scan.old.items(), *scan.deep.items()])
        parts.append(f"imports {paths}: import from mirage.plugin instead")
    if generation < GENERATION:
        parts.append("its components are built with the constructors of plugin API 1, adapted "
                     "(today: cls(config, options))")
    if not parts:
        return None
    return (f"plugin {plugin_name!r} {'; '.join(parts)}. These keep working until mirage-rl "
            f"{REMOVED_IN} (docs/plugin-api.md, 'Upgrading a plugin')")


def build_legacy(kind: str, cls: type, config: Any, options: Any) -> Any:
    """A generation-1 component, built as 4 December's MIRAGE built it, then given
    today's attributes where its own constructor left them unset."""
    if kind == "filter":
        component = cls(config.filter)
    elif kind == "logger":
        component = cls(options)
        component.config = config
    else:
        component = cls(config)
    if getattr(component, "options", None) is None:
        component.options = options
    return component

"""The plugin API's version, and which plugins this MIRAGE can load.

The plugin API is what :mod:`mirage.plugin` exports, the hook specifications and the
shapes MIRAGE builds components with. Its version changes apart from the package's:
the minor number when something is added, the major when something a plugin relied on
changes (docs/plugin-api.md has the history). A plugin may declare the API it was written
for, either way:

* ``MIRAGE_PLUGIN_API = ">=2.1,<3"`` in its plugin module (a PEP 440 specifier set on the
  API version), or
* a requirement on ``mirage-rl`` in its package's metadata (``dependencies =
  ["mirage-rl>=0.2,<0.3"]``), checked against the installed ``mirage-rl``.

A plugin whose declaration admits none of the API versions MIRAGE reads (:data:`READS`) is
set aside with a line naming what it needs and what is installed. Major version 1 (the
flat ``mirage.core.*`` paths and constructors of 4 December 2026) is read through
adapters, with a deprecation warning (mirage/core/plugin_api/legacy.py)."""

from __future__ import annotations

from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

API_VERSION = "2.5"
GENERATION = int(API_VERSION.split(".")[0])
"""The major version: the constructors and paths today's components are built with."""
READS = ("1.0", "2.0", "2.1", "2.2", "2.3", "2.4", "2.5")
"""Every plugin API version a plugin may be written for and still load, oldest first."""
DECLARATION = "MIRAGE_PLUGIN_API"


def mirage_version() -> str:
    try:
        return metadata.version("mirage-rl")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def installed() -> str:
    """``mirage-rl 0.2.0 (plugin API 2.2; reads plugin API 1.0-2.2)``."""
    return f"mirage-rl {mirage_version()} (plugin API {API_VERSION}; reads plugin API {READS[0]}-{READS[-1]})"


class IncompatiblePlugin(Exception):
    """A plugin written for a plugin API (or a mirage-rl) this MIRAGE does not read."""


def declared_generation(plugin: object, distribution: metadata.Distribution | None) -> int | None:
    """The major API version a plugin is written for, from its declarations: the newest
    version in :data:`READS` its ``MIRAGE_PLUGIN_API`` admits; None when it declares none.
    Raises :class:`IncompatiblePlugin` when a declaration admits nothing installed."""
    declared = getattr(plugin, DECLARATION, None)
    generation = None
    if declared is not None:
        try:
            wanted = SpecifierSet(str(declared))
        except InvalidSpecifier:
            raise IncompatiblePlugin(f"{DECLARATION} = {declared!r} is not a version specifier "
                                     "(for example '>=2.1,<3')") from None
        admitted = [v for v in READS if Version(v) in wanted]
        if not admitted:
            raise IncompatiblePlugin(f"it needs plugin API {declared}; installed: {installed()}")
        generation = Version(admitted[-1]).major
    if distribution is not None:
        _check_requirement(distribution)
    return generation


def _check_requirement(distribution: metadata.Distribution) -> None:
    """Refuse a package whose requirement on ``mirage-rl`` excludes the installed one."""
    version = mirage_version()
    if version == "0+unknown":
        return
    for line in distribution.requires or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name.lower().replace("_", "-") != "mirage-rl" or requirement.marker is not None:
            continue
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            raise IncompatiblePlugin(f"it needs mirage-rl{requirement.specifier}; installed: {installed()}")

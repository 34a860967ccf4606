"""``PATH=VALUE`` settings on the typed RunConfig, one parser for every command line that
takes them (``core run --set``, ``core sweep --set/--grid``, ``core runs --where``).

A PATH is a dotted config field (``filter.rho``, ``steps``); under a free-form mapping
field (``env.options``) any key is allowed. A VALUE is read as the field's type says: a
string field takes the text as it is (``filter.name=top_p``), other fields read it as JSON
(``filter.rho=0.5``, ``diagnostics.names=["mi"]``), and a free-form entry is JSON when it
parses, else text. An unknown PATH is refused listing the valid ones around it.

Config data (nested mappings) changes only through :func:`assign` and :func:`merged`,
which every command and ``registry.yaml``'s grids share: a mapping merges into a mapping,
and :func:`merged` copies, so a loaded experiment's base is never written.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from mirage.core.config.legacy import MOVED
from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError

OPEN = object()  # the type of an entry under a free-form mapping field


@lru_cache(maxsize=1)
def _fields() -> tuple[dict[str, Any], frozenset[str], frozenset[str]]:
    """(leaf path -> annotated type, section paths, free-form mapping paths)."""
    leaves: dict[str, Any] = {}
    sections: set[str] = set()
    mappings: set[str] = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            path = prefix + name
            kind = field.annotation
            section = _optional_section(kind)  # model.lora: its settings are paths too
            if section is not None:
                sections.add(path)
                walk(section, path + ".")
                continue
            leaves[path] = Annotated[kind, *field.metadata] if field.metadata else kind
            if getattr(kind, "__origin__", None) is dict:
                mappings.add(path)

    walk(RunConfig, "")
    return leaves, frozenset(sections), frozenset(mappings)


def _optional_section(kind: Any) -> type[BaseModel] | None:
    """The section ``kind`` is (a BaseModel, or one or None), or None."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        members = [k for k in typing.get_args(kind) if k is not type(None)]
        kind = members[0] if len(members) == 1 else None
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def setting_type(path: str, flag: str = "--set") -> Any:
    """The type of the config field at ``path`` (``OPEN`` under a free-form mapping);
    ConfigError listing the valid paths around an unknown one."""
    leaves, sections, mappings = _fields()
    if path in leaves:
        return leaves[path]
    if path in MOVED:
        raise ConfigError(f"{flag} {path}: this setting moved to {MOVED[path][0]}")
    if any(path.startswith(m + ".") and len(path) > len(m) + 1 for m in mappings):
        return OPEN
    parent = path.rpartition(".")[0]
    while parent and parent not in sections:
        parent = parent.rpartition(".")[0]
    prefix = parent + "." if parent else ""
    valid = sorted({prefix + rest.split(".")[0] + (".*" if prefix + rest.split(".")[0] in sections else "")
                    for leaf in leaves if leaf.startswith(prefix)
                    for rest in [leaf[len(prefix):]]})
    raise ConfigError(f"{flag} {path}: unknown config path; valid{' under ' + parent if parent else ''}: "
                      + ", ".join(valid))


def parse_value(path: str, raw: str, flag: str = "--set") -> Any:
    """``raw`` read as the type of the config field at ``path`` (see the module docstring)."""
    kind = setting_type(path, flag)
    if kind is OPEN:
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    adapter = TypeAdapter(kind)
    try:
        value = adapter.validate_json(raw)
    except ValidationError:
        try:
            value = adapter.validate_python(raw)
        except ValidationError as error:
            first = error.errors()[0]["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{flag} {path}={raw}: {first}") from None
    return adapter.dump_python(value, mode="json")


def split_pair(pair: str, flag: str) -> tuple[str, str]:
    path, sep, raw = pair.partition("=")
    if not sep or not path:
        raise ConfigError(f"{flag} expects PATH=VALUE, got {pair!r}")
    return path, raw


def parse_settings(pairs: Iterable[str], flag: str = "--set") -> dict[str, Any]:
    """``PATH=VALUE`` strings as ``{path: typed value}`` (a later path wins)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        path, raw = split_pair(pair, flag)
        out[path] = parse_value(path, raw, flag)
    return out


def assign(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``path`` in nested config data, creating sections on the way; a mapping value
    merges into a mapping already there (``env.options={"slip": 0.1}`` keeps the other
    options). Raises ConfigError when the path goes through a value that is not a mapping."""
    *parents, leaf = path.split(".")
    for part in parents:
        data = data.setdefault(part, {})
        if not isinstance(data, dict):
            raise ConfigError(f"{path!r} goes through a non-mapping value")
    if isinstance(value, dict) and isinstance(data.get(leaf), dict):
        data[leaf] = merged(data[leaf], value)
    else:
        data[leaf] = value


def merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with ``extra`` merged in (mappings merge, values replace);
    neither argument is changed."""
    out = {k: merged(v, {}) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = merged(value, {}) if isinstance(value, dict) else value
    return out


def raw_pairs(pairs: Iterable[str], flag: str, form: str = "PATH=VALUE") -> dict[str, Any]:
    """``KEY=VALUE`` strings as a dict, each VALUE read as JSON when it parses, else as
    text (``--grid`` axes, ``--env-opt``: typed later, by the config)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects {form}, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out

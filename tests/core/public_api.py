"""A snapshot of MIRAGE's public plugin API: what ``mirage.plugin`` and
``mirage.plugin.testing`` export, the signatures of the component base classes and of
every public method, the fields of the data types, and the hook specifications with
their arguments and options. ``tests/core/test_public_api.py`` compares it with
tests/core/data/public_api.json; after a deliberate change, rewrite that file with

    .venv/bin/python tests/core/public_api.py --update

in the same commit, bump ``API_VERSION`` (mirage/core/plugin_api/version.py) and add a
line to CHANGELOG.md."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).parent / "data" / "public_api.json"


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(?)"


def _class(cls: type) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": "class", "bases": [f"{b.__module__}.{b.__qualname__}" for b in cls.__bases__]}
    if dataclasses.is_dataclass(cls):
        entry["fields"] = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, dict):
        entry["fields"] = {name: str(field.annotation) for name, field in model_fields.items()}
    members = {}
    for name, value in sorted(vars(cls).items()):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, (staticmethod, classmethod)):
            members[name] = f"{type(value).__name__}{_signature(value.__func__)}"
        elif inspect.isfunction(value):
            abstract = " abstract" if getattr(value, "__isabstractmethod__", False) else ""
            members[name] = f"def{_signature(value)}{abstract}"
        elif isinstance(value, property):
            members[name] = "property"
        elif isinstance(value, (bool, int, float, str, tuple)) or value is None:
            members[name] = f"= {value!r}"
        elif inspect.isclass(value):
            members[name] = f"class {value.__module__}.{value.__qualname__}"
    entry["members"] = members
    return entry


def describe(value: Any) -> dict[str, Any]:
    if inspect.isclass(value):
        return _class(value)
    if inspect.isfunction(value):
        return {"kind": "function", "signature": _signature(value)}
    if isinstance(value, dict):
        return {"kind": "dict", "keys": sorted(value)}
    return {"kind": type(value).__name__, "value": repr(value) if isinstance(value, (str, int, float)) else None}


def hookspecs() -> dict[str, Any]:
    from mirage.core.plugin_api import hookspecs as specs

    found = {}
    for name, function in sorted(vars(specs).items()):
        options = getattr(function, "mirage_spec", None)
        if options is not None:
            found[name] = {"args": list(inspect.signature(function).parameters),
                           "options": {k: v for k, v in sorted(options.items()) if v}}
    return found


def snapshot() -> dict[str, Any]:
    import mirage.plugin
    import mirage.plugin.testing

    return {
        "api_version": mirage.plugin.API_VERSION,
        "modules": {module.__name__: {name: describe(getattr(module, name)) for name in sorted(module.__all__)}
                    for module in (mirage.plugin, mirage.plugin.testing)},
        "hookspecs": hookspecs(),
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/core/public_api.py --update")
    SNAPSHOT.write_text(render(snapshot()))
    print(f"wrote {SNAPSHOT}")

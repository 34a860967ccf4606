"""Finding, filtering and comparing stored runs (rows as ``RunStore.get_run`` returns them);
pure functions shared by the ``core`` run commands and the app."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mirage.core.config.nested import MISSING, lookup
from mirage.core.errors import ConfigError
from mirage.core.store.heartbeat import effective_status

TABLE_COLUMNS = ("id", "name", "status", "env", "algo", "filter", "rho", "seed", "last step",
                 "created", "tags")


def find_run(runs: Sequence[Mapping[str, Any]], ref: str) -> Mapping[str, Any]:
    """The run ``ref`` names: its id, its name, or a prefix of one id. ConfigError for
    none (``unknown run``) or several (``ambiguous``, listing them)."""
    for key in ("run_id", "name"):
        exact = [r for r in runs if r.get(key) == ref]
        if len(exact) == 1:
            return exact[0]
    matches = [r for r in runs if ref and r["run_id"].startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(r["run_id"] + (f" ({r['name']})" if r.get("name") else "") for r in matches)
        raise ConfigError(f"run prefix {ref!r} is ambiguous: {shown}")
    raise ConfigError(f"unknown run: no run {ref!r} (by id, name or id prefix)")


def matches(run: Mapping[str, Any], *, where: Mapping[str, Any] = {}, status: str | None = None,
            tags: Sequence[str] = (), experiment: str | None = None) -> bool:
    """Whether ``run`` has every ``where`` config value (dotted path -> value), the
    (effective) ``status``, every tag in ``tags`` and the ``experiment``."""
    if status is not None and effective_status(run) != status:
        return False
    if experiment is not None and run.get("experiment") != experiment:
        return False
    if not set(tags) <= set(run.get("tags") or ()):
        return False
    return all(lookup(run["config"], path) == value for path, value in where.items())


def table_row(run: Mapping[str, Any]) -> dict[str, str]:
    """The ``core runs`` columns of one run, as text."""
    config = run["config"]

    def at(path: str) -> str:
        value = lookup(config, path)
        return "" if value is MISSING or value is None else str(value)

    return {
        "id": run["run_id"], "name": run.get("name") or "", "status": effective_status(run),
        "env": at("env.name"), "algo": at("algorithm.name"), "filter": at("filter.name"),
        "rho": at("filter.rho"), "seed": at("seed"),
        "last step": "" if run.get("last_step") is None else str(run["last_step"]),
        "created": f"{run['created_at']:%Y-%m-%d %H:%M}", "tags": ",".join(run.get("tags") or ()),
    }


def render_table(rows: Sequence[Mapping[str, str]], columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """Left-aligned columns, two spaces apart, a header line first."""
    widths = [max([len(c)] + [len(r[c]) for r in rows]) for c in columns]
    lines = [[c for c in columns]] + [[r[c] for c in columns] for r in rows]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``{dotted.path: leaf}``."""
    if not isinstance(data, Mapping) or not data:
        return {prefix.rstrip("."): data} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out |= flatten(value, f"{prefix}{key}.")
    return out


def differences(left: Any, right: Any) -> list[tuple[str, Any, Any]]:
    """``(path, left value, right value)`` for every dotted path whose values differ
    (``MISSING`` where one side lacks it), by path."""
    a, b = flatten(left), flatten(right)
    return [(path, a.get(path, MISSING), b.get(path, MISSING))
            for path in sorted(a.keys() | b.keys()) if a.get(path, MISSING) != b.get(path, MISSING)]

"""Named component registries: one per kind, filled through the registration hooks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Iterator, TypeVar

from mirage.core.backend import Backend
from mirage.core.components import AdvantageEstimator, Algorithm, Diagnostic, Filter, Logger
from mirage.core.env import Environment

T = TypeVar("T")

KINDS = ("envs", "backends", "algorithms", "estimators", "filters", "diagnostics", "loggers")


class UnknownComponentError(KeyError):
    """An unknown component name; the message lists the valid ones."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        self.kind, self.name, self.valid = kind, name, valid
        super().__init__(f"unknown {kind[:-1]} {name!r}; valid: {', '.join(valid) or '(none)'}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


@dataclass
class Registry(Generic[T]):
    """Name -> component for one kind; refuses duplicates, unknown names and (with a
    ``contract``) a component that is not a subclass of it."""

    kind: str
    contract: type | None = None
    _items: dict[str, T] = field(default_factory=dict)
    _owners: dict[str, str] = field(default_factory=dict)

    def register(self, name: str, component: T, owner: str = "?") -> None:
        if not name or not isinstance(name, str):
            raise ValueError(f"{self.kind}: component name must be a non-empty string")
        if self.contract is not None and not (
            isinstance(component, type) and issubclass(component, self.contract)
        ):
            base = f"{self.contract.__module__}.{self.contract.__qualname__}"
            raise ValueError(f"{self.kind}: {name!r} (by {owner}) must subclass {base}; "
                             f"got {component!r}")
        if name in self._items:
            raise ValueError(
                f"{self.kind}: {name!r} registered twice (by {self._owners[name]} and {owner})"
            )
        self._items[name] = component
        self._owners[name] = owner

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownComponentError(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def owner(self, name: str) -> str:
        return self._owners[name]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


@dataclass
class Registries:
    """The registries of one plugin manager, one per kind in :data:`KINDS`."""

    envs: Registry[Any] = field(default_factory=lambda: Registry("envs", Environment))
    backends: Registry[Any] = field(default_factory=lambda: Registry("backends", Backend))
    algorithms: Registry[Any] = field(default_factory=lambda: Registry("algorithms", Algorithm))
    estimators: Registry[Any] = field(default_factory=lambda: Registry("estimators", AdvantageEstimator))
    filters: Registry[Any] = field(default_factory=lambda: Registry("filters", Filter))
    diagnostics: Registry[Any] = field(default_factory=lambda: Registry("diagnostics", Diagnostic))
    loggers: Registry[Any] = field(default_factory=lambda: Registry("loggers", Logger))

    def of(self, kind: str) -> Registry[Any]:
        if kind not in KINDS:
            raise UnknownComponentError("kinds", kind, list(KINDS))
        return getattr(self, kind)

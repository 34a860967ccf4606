"""Named component registries: one per kind, filled through the registration hooks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Iterator, TypeVar

from mirage.core.plugin_api.components import AdvantageEstimator, Algorithm, Diagnostic, Filter, Logger
from mirage.core.plugin_api.version import GENERATION
from mirage.core.rl.backend import Backend
from mirage.core.rl.env import Environment

T = TypeVar("T")

KINDS = ("envs", "backends", "algorithms", "estimators", "filters", "diagnostics", "loggers")


class UnknownComponentError(KeyError):
    """An unknown component name; the message lists the valid ones."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        self.kind, self.name, self.valid = kind, name, valid
        super().__init__(f"unknown {kind[:-1]} {name!r}; valid: {', '.join(valid) or '(none)'}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class SetAsideComponentError(UnknownComponentError):
    """A component of a plugin that was set aside (mirage/core/plugin_api/failures.py); the
    message is the plugin's failure line."""

    def __init__(self, kind: str, name: str, valid: list[str], failure: str):
        super().__init__(kind, name, valid)
        self.args = (f"{kind[:-1]} {name!r} is not available: {failure}",)


def duck_typed(component: object, contract: type) -> bool:
    """A class without the contract's base that has every method the base leaves
    abstract: how plugins of plugin API 1 could write a component (the earliest guides
    named no base class)."""
    return isinstance(component, type) and all(
        callable(getattr(component, method, None)) for method in getattr(contract, "__abstractmethods__", ()))


def with_base(component: type, contract: type) -> type:
    """``component`` with ``contract`` added as a base (after its own), so the run sees
    the contract's defaults (a diagnostic's ``due``) and the component's own methods win."""
    return type(component.__name__, (component, contract), {
        "__module__": component.__module__, "__qualname__": component.__qualname__, "__doc__": component.__doc__})


@dataclass
class Registry(Generic[T]):
    """Name -> component for one kind; refuses duplicates, unknown names and (with a
    ``contract``) a component that is not a subclass of it."""

    kind: str
    contract: type | None = None
    _items: dict[str, T] = field(default_factory=dict)
    _owners: dict[str, str] = field(default_factory=dict)
    _generations: dict[str, int] = field(default_factory=dict)
    set_aside: dict[str, str] = field(default_factory=dict)
    """Names a set-aside plugin tried to register -> its failure line."""
    failed_plugins: list[str] = field(default_factory=list)
    """Every set-aside plugin's failure line (shared by the registries of one manager)."""

    def problem(self, name: object, component: object, owner: str = "?",
                taken: dict[str, str] | None = None, generation: int = GENERATION) -> str | None:
        """Why ``register`` would refuse ``component`` under ``name`` (None: it would
        not); ``taken`` holds more names already claimed (name -> owner)."""
        if not name or not isinstance(name, str):
            return f"{self.kind}: component name must be a non-empty string; got {name!r}"
        if self.contract is not None and not (
            isinstance(component, type) and issubclass(component, self.contract)
        ) and not (generation < GENERATION and duck_typed(component, self.contract)):
            base = f"{self.contract.__module__}.{self.contract.__qualname__}"
            return f"{self.kind}: {name!r} (by {owner}) must subclass {base}; got {component!r}"
        first = self._owners.get(name) or (taken or {}).get(name)
        if first is not None:
            return f"{self.kind}: {name!r} registered twice (by {first} and {owner})"
        return None

    def register(self, name: str, component: T, owner: str = "?", generation: int = GENERATION) -> None:
        problem = self.problem(name, component, owner, generation=generation)
        if problem is not None:
            raise ValueError(problem)
        if self.contract is not None and not issubclass(component, self.contract):
            component = with_base(component, self.contract)
        self._items[name] = component
        self._owners[name] = owner
        self._generations[name] = generation

    def generation(self, name: str) -> int:
        """The plugin API major version ``name``'s plugin was written for (how it is
        built: mirage/core/plugin_api/legacy.py)."""
        return self._generations.get(name, GENERATION)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            if name in self.set_aside:
                raise SetAsideComponentError(self.kind, name, self.names(), self.set_aside[name]) from None
            error = UnknownComponentError(self.kind, name, self.names())
            if self.failed_plugins:  # one of them may have meant to provide it
                error.args = (f"{error.args[0]} (set aside: {'; '.join(self.failed_plugins)})",)
            raise error from None

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

    def set_aside(self, failure: str, components: dict[str, list[str]]) -> None:
        """Remember a set-aside plugin's failure line, and the names it tried to register
        that no other plugin holds: asking for one of them fails with that line."""
        for kind in KINDS:
            registry = self.of(kind)
            registry.failed_plugins.append(failure)
            for name in components.get(kind, []):
                if isinstance(name, str) and name not in registry:
                    registry.set_aside.setdefault(name, failure)

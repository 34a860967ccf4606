"""Components' own typed options: one mechanism for every kind of component.

A component class (environment, backend, algorithm, filter, diagnostic, logger) may
declare ``Options``, a pydantic model with ``extra="forbid"`` whose defaults are the
component's. The run config holds the settings given for a chosen component as plain
data: in its section's ``options`` for a kind the run chooses one of (``env.options``,
``model.options`` for the backend, ``algorithm.options``, ``filter.options``), and by
name for a kind it names a list of (``diagnostics.options[name]``,
``loggers.options[name]``). :func:`mirage.core.run.validate.component_options` checks them
against the class's ``Options`` before any work starts. A class without ``Options``
takes none.

Every kind the run builds once (all but environments, built per episode from their
options alone) subclasses :class:`Component` and is built the same way:
``cls(config, options)``, the resolved run config and the validated ``Options``
(:func:`mirage.core.run.validate.build_component`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticUndefined

if TYPE_CHECKING:
    from mirage.core.config.run_config import RunConfig


class NoOptions(BaseModel):
    """The options of a component that declares none."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Component:
    """What every run component is built with: ``cls(config, options)``. ``config`` is the
    resolved :class:`mirage.core.config.run_config.RunConfig` (shared settings such as
    ``config.filter.rho`` are read there), ``options`` this class's validated ``Options``
    (:class:`NoOptions` for a class that declares none). A subclass with its own
    ``__init__`` takes the same two arguments and calls ``super().__init__(config, options)``.
    (``options`` may be left out by a component of plugin API 1, whose constructors took
    one argument: mirage/core/plugin_api/legacy.py sets it after.)"""

    def __init__(self, config: "RunConfig", options: BaseModel | None = None) -> None:
        self.config = config
        self.options = options


def options_class(cls: type) -> type[BaseModel]:
    """``cls.Options``, or :class:`NoOptions` for a component that declares none."""
    return getattr(cls, "Options", NoOptions)


def describe_options(cls: type) -> list[tuple[str, str, str, str]]:
    """(name, type, default, description) of every option ``cls`` declares."""
    rows = []
    for field_name, field in options_class(cls).model_fields.items():
        annotation = field.annotation
        plain = isinstance(annotation, type) and not getattr(annotation, "__args__", None)
        kind = annotation.__name__ if plain else str(annotation).replace("typing.", "")
        if field.default is not PydanticUndefined:
            default = repr(field.default)
        elif field.default_factory is not None:
            default = repr(field.default_factory())
        else:
            default = "(required)"
        rows.append((field_name, kind, default, field.description or ""))
    return rows


def render_options(kind: str, name: str, cls: type) -> str:
    """``core plugins --options NAME``: a component's options, one per line."""
    rows = describe_options(cls)
    lines = [f"{kind} {name}: {len(rows)} option{'s' * (len(rows) != 1)}"]
    for option, kind_name, default, description in rows:
        lines.append(f"  {option}: {kind_name} = {default}" + (f"  {description}" if description else ""))
    return "\n".join(lines)

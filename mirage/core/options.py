"""Components' own typed options: one mechanism for every kind of component.

A component class (environment, filter, backend, algorithm, logger) may declare
``Options``, a pydantic model with ``extra="forbid"`` whose defaults are the component's.
The run config holds the settings given for the chosen component as plain data in its
section (``env.options``, ``filter.options``, ``model.options`` for the backend,
``algorithm.options``, ``loggers.options[name]``);
:func:`mirage.core.validate.component_options` checks them against the class's
``Options`` before any work starts. A class without ``Options`` takes none.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticUndefined


class NoOptions(BaseModel):
    """The options of a component that declares none."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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

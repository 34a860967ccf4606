"""Protocols of the named components an algorithm, filter, diagnostic or logger plugin provides."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol

if TYPE_CHECKING:
    from mirage.core.batch import Batch, Selection
    from mirage.core.config import FilterConfig, RunConfig
    from mirage.core.session import RunSession


class Algorithm(Protocol):
    """Built as ``cls(config: RunConfig)``; ``update`` trains on ``batch.kept_groups()``
    through ``run.backend`` and returns its metrics. It may also define a classmethod
    ``config_problem(config, backend_cls) -> str | None``: a one-line reason it cannot
    run ``config`` with that backend (checked before any work), or None."""

    def __init__(self, config: "RunConfig") -> None: ...

    def update(self, run: "RunSession", batch: "Batch") -> Mapping[str, float]: ...


class Filter(Protocol):
    """Built as ``cls(config: FilterConfig)``. A filter that ranks by reward variance
    sets the class attribute ``requires_variance = True`` (validation then demands G >= 2).

    Optional: a class ``Options`` (a pydantic model, ``extra="forbid"``), the filter's own
    settings, read as ``cls.Options(**config.options)``; validation checks
    ``filter.options`` against it (mirage/core/options.py). Algorithms (``algorithm.options``)
    and backends (``model.options``) declare theirs the same way."""

    def __init__(self, config: "FilterConfig") -> None: ...

    def select(self, batch: "Batch") -> "Selection": ...


class Diagnostic(Protocol):
    """Built as ``cls(config: RunConfig)``; ``measure`` returns ``{metric_name: value}``.

    Optional: ``due(step) -> bool`` says on which steps ``measure`` runs (default: step 1
    and every ``diagnostics.every`` steps); ``review(run, metrics) -> {name: value}`` is
    called on every step with all diagnostics' merged metrics of that step, after every
    ``measure`` (the collapse alarm reads the MI proxies this way)."""

    def __init__(self, config: "RunConfig") -> None: ...

    def measure(self, run: "RunSession", batch: "Batch") -> Mapping[str, float]: ...


class Logger(Protocol):
    """An experiment tracker that mirrors the store (docs/loggers.md). Built as
    ``cls(options)`` where ``options`` is a ``cls.Options`` (a pydantic model) made from
    ``loggers.options[name]``. ``open`` is called when the run starts or resumes,
    ``log`` after each step is stored, ``close`` when the run ends (its status:
    finished, stopped or failed). A logger that raises is disabled for the rest of the
    run and a ``logger`` event names it; the run goes on.

    Optional: a classmethod ``missing_requirement() -> str | None``, a one-line reason
    it cannot run here (its library is not installed), checked before any work."""

    def __init__(self, options: Any) -> None: ...

    def open(self, run_id: str, config: "RunConfig", store_dir: Path, first_step: int) -> None: ...

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self, status: str) -> None: ...

"""Base classes of the named components an algorithm, advantage estimator, filter,
diagnostic or logger plugin provides. Each states every method the run calls on it: the
abstract ones a component implements, and the optional ones with the default it inherits.
A registry refuses a class that does not subclass its kind's base (mirage/core/plugin_api/registry.py).

Algorithms, filters, diagnostics and loggers (and backends, mirage/core/rl/backend.py) are
:class:`mirage.core.config.options.Component`: built once per run as ``cls(config, options)``,
the resolved run config and the class's validated ``Options`` (mirage/core/config/options.py).

``run`` is the run's :class:`mirage.core.plugin_api.session.RunSession`, typed ``Any`` here: the
session holds the plugin manager, whose registries import this module, so naming its
class would close an import circle."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from mirage.core.config.options import Component

if TYPE_CHECKING:
    from pydantic import BaseModel

    from mirage.core.config.run_config import RunConfig
    from mirage.core.rl.backend import Backend
    from mirage.core.rl.batch import Batch, Selection


class Algorithm(Component, ABC):
    """Built as ``cls(config, options)`` (``options`` from ``algorithm.options``);
    ``update`` trains on ``batch.kept_groups()`` through ``run.backend`` and returns its
    metrics. The update's shared settings are ``config.algorithm``'s."""

    preset: ClassVar[Mapping[str, Any]] = {}
    """Values for the ``algorithm`` section's settings a config leaves unset (None), e.g.
    PPO's ``{"adv_estimator": "gae", "loss_agg_mode": "token-mean"}``. Resolved into the
    run's config before anything runs (:func:`mirage.core.run.validate.resolve_algorithm`), so
    a stored config shows what ran. Default: none."""

    @classmethod
    def config_problem(cls, config: "RunConfig", backend_cls: type["Backend"]) -> str | None:
        """A one-line reason this algorithm cannot run ``config`` with ``backend_cls``
        (checked before any work, e.g. GAE needs a backend with a critic), or None.
        Default: none."""
        return None

    @abstractmethod
    def update(self, run: Any, batch: "Batch") -> Mapping[str, float]: ...


class AdvantageEstimator(ABC):
    """Named by ``algorithm.adv_estimator``: gives every response token of the trajectories
    an algorithm trains on its advantage. Built by the algorithm as ``cls(config:
    RunConfig)``: an estimator has no options of its own, the settings it reads are the
    ``algorithm`` section's (filled from ``defaults``). ``rows`` returns, per trajectory,
    its training rows (:class:`mirage.plugins.verl_algorithms.common.Row`: one per turn
    with response tokens)."""

    needs_critic: ClassVar[bool] = False
    """True when ``rows`` reads a critic: validation then demands a backend with one."""

    defaults: ClassVar[Mapping[str, Any]] = {}
    """Values for the ``algorithm`` settings this estimator reads, where neither the config
    nor the algorithm's preset sets them (GAE: gamma, lambda, the critic's learning rate)."""

    def __init__(self, config: "RunConfig") -> None:
        self.config = config

    @abstractmethod
    def rows(self, run: Any, trajectories: list[Any], groups: list[int],
             rewards: list[list[float]]) -> list[list[Any]]:
        """Per trajectory, its rows with advantages. ``groups[i]`` numbers trajectory i's
        prompt group; ``rewards[i]`` are its turn rewards after shaping."""


class Filter(Component, ABC):
    """Built as ``cls(config, options)``; ``select`` says which groups (or trajectories) of
    the batch the update trains on. The settings filters share (``rho``, ``score``,
    ``keep``, ``include_zero``) are ``config.filter``'s.

    Optional: a class ``Options`` (a pydantic model, ``extra="forbid"``), the filter's own
    settings (the quartile filter's ``quartile``), given in ``filter.options`` and passed
    as ``options`` once validated (mirage/core/config/options.py). Every other kind declares its
    options the same way."""

    requires_variance: ClassVar[bool] = False
    """True for a filter that ranks by reward variance: validation then demands G >= 2."""

    @abstractmethod
    def select(self, batch: "Batch") -> "Selection": ...


class Diagnostic(Component, ABC):
    """Built as ``cls(config, options)`` (``options`` from ``diagnostics.options[name]``);
    ``measure`` returns ``{metric_name: value}`` on the steps ``due`` names. A subclass
    with its own ``__init__`` calls ``super().__init__(config, options)``: the default
    ``due`` reads ``self.config``."""

    @classmethod
    def config_problem(cls, config: "RunConfig") -> str | None:
        """A one-line reason this diagnostic cannot run ``config`` (checked before any
        work, after every diagnostic's options: the collapse alarm needs the MI proxies of
        its scope), or None. Default: none."""
        return None

    def due(self, step: int) -> bool:
        """Whether ``measure`` runs at ``step``. Default: step 1 and every
        ``diagnostics.every`` steps (step 0 asks as step 1)."""
        return step == 1 or step % self.config.diagnostics.every == 0

    @abstractmethod
    def measure(self, run: Any, batch: "Batch") -> Mapping[str, float]: ...

    def review(self, run: Any, metrics: Mapping[str, float]) -> Mapping[str, float]:
        """Called on every step with all diagnostics' merged metrics of that step, after
        every ``measure``; returns more metrics (the collapse alarm reads the MI proxies
        this way). Default: none."""
        return {}


class Logger(Component, ABC):
    """An experiment tracker that mirrors the store (docs/loggers.md). Built as
    ``cls(config, options)`` where ``options`` is a ``cls.Options`` (a pydantic model) made
    from ``loggers.options[name]``. ``open`` is called when the run starts or resumes,
    ``log`` after each step is stored, ``close`` when the run ends (its status:
    finished, stopped or failed). A logger that raises is disabled for the rest of the
    run and a ``logger`` event names it; the run goes on."""

    Options: ClassVar[type["BaseModel"]]

    @classmethod
    def missing_requirement(cls) -> str | None:
        """A one-line reason this logger cannot run here (its library is not installed),
        checked before any work, or None. Default: none."""
        return None

    @abstractmethod
    def open(self, run_id: str, config: "RunConfig", store_dir: Path, first_step: int) -> None: ...

    @abstractmethod
    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    @abstractmethod
    def close(self, status: str) -> None: ...

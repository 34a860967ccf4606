"""MIRAGE's public API for plugin authors: everything a plugin of any kind needs, and nothing
else. Import from here (``from mirage.plugin import hookimpl, Filter, Selection``); every
other module path is internal and may move between releases (docs/plugin-api.md). What
this module exports is frozen by ``tests/core/test_public_api.py``: a change to it bumps
:data:`API_VERSION` and gets a line in CHANGELOG.md.

Groups, in run order:

* the hook marker and the ``register`` callback's type;
* components of each kind, built as ``cls(config, options)``: :class:`Algorithm`,
  :class:`AdvantageEstimator`, :class:`Filter`, :class:`Diagnostic`, :class:`Logger`,
  :class:`Backend`, and their options (:class:`Component`, :class:`NoOptions`;
  a component's own ``Options`` is a pydantic ``BaseModel``);
* the environment contract: :class:`Environment`, :class:`EnvOptions`,
  :class:`StepOutcome`, demonstrator types (:class:`DemoTurn`, :data:`Demonstrator`), image
  observations (:class:`Image`, :data:`IMAGE_MARK`) and the answer-environment helpers for
  question-answering environments;
* what flows through a step: :class:`Batch`, :class:`Group`, :class:`Trajectory`,
  :class:`Turn`, :class:`Prompt` (a context's ids with its pictures, as backends take it), :class:`Selection`, :class:`PolicyOutput`, :class:`CrossScores`, and
  :class:`Row` (an estimator's training row);
* the run's configuration (:class:`RunConfig`, read-only to components);
* errors a plugin may raise: :class:`ConfigError`, :class:`PluginResultError`;
* built-ins meant to be extended: :class:`PolicyGradient`, :class:`LocalBackend`.

Helpers for a plugin's own tests (a tiny config, a run, a plugin manager with the plugin
under test) are in :mod:`mirage.plugin.testing`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mirage.core.config.options import Component, NoOptions
from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError, PluginResultError
from mirage.core.plugin_api.components import AdvantageEstimator, Algorithm, Diagnostic, Filter, Logger
from mirage.core.plugin_api.hookspecs import Register, hookimpl
from mirage.core.plugin_api.version import API_VERSION
from mirage.core.rl.batch import Batch, Group, Selection, Trajectory, Turn
from mirage.core.rl.env import Demonstrator, DemoTurn, Environment, EnvOptions, StepOutcome
from mirage.core.rl.image import IMAGE_MARK, Image
from mirage.core.rl.prompt import Prompt
from mirage.core.rl.policy_output import CrossScores, PolicyOutput
from mirage.envs.answer import AnswerEnvironment, AnswerOptions, PersonaAnswerDemonstrator, parse_number

# Imported when first asked for: they pull in torch, transformers and veRL (seconds), and
# a filter or environment plugin that never names them should load as fast as the CLI starts.
_LAZY = {
    "Backend": "mirage.core.rl.backend",
    "Row": "mirage.core.rl.training",
    "LocalBackend": "mirage.plugins.backend_local.backend",
    "PolicyGradient": "mirage.plugins.verl_algorithms.update",
}

if TYPE_CHECKING:
    from mirage.core.rl.backend import Backend
    from mirage.core.rl.training import Row
    from mirage.plugins.backend_local.backend import LocalBackend
    from mirage.plugins.verl_algorithms.update import PolicyGradient


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mirage.plugin' has no attribute {name!r}")

__all__ = [
    "API_VERSION",
    # hooks
    "hookimpl", "Register",
    # components
    "Component", "NoOptions", "Algorithm", "AdvantageEstimator", "Filter", "Diagnostic", "Logger",
    "Backend",
    # environments
    "Environment", "EnvOptions", "StepOutcome", "DemoTurn", "Demonstrator", "Image", "IMAGE_MARK",
    "AnswerEnvironment", "AnswerOptions", "PersonaAnswerDemonstrator", "parse_number",
    # a step's data
    "Batch", "Group", "Trajectory", "Turn", "Prompt", "Selection", "PolicyOutput", "CrossScores", "Row",
    # configuration and errors
    "RunConfig", "ConfigError", "PluginResultError",
    # built-ins to extend
    "PolicyGradient", "LocalBackend",
]

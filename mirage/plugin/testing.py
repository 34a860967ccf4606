"""Helpers for a plugin's own tests: a config small enough for a run to take seconds, a
plugin manager with the plugin under test, a run, its store, and an environment's
episode driven by hand. Public like :mod:`mirage.plugin` (frozen by
``tests/core/test_public_api.py``)."""

from __future__ import annotations

from mirage.builtins import cli as core_program
from mirage.core.config.presets import TINY
from mirage.core.config.run_config import EnvConfig
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.episode import apply_response, build_context, start_episode
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config, validate_config
from mirage.core.store.run_store import RunStore

__all__ = [
    "TINY", "EnvConfig", "build_config", "validate_config", "build_plugins", "execute",
    "RunStore", "start_episode", "build_context", "apply_response", "core_program",
]

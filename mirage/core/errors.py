"""The exceptions raised on every floor of core, kept at the ground floor: raising one imports
nothing else."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration value; the message is one line naming it."""


class PluginResultError(RuntimeError):
    """A plugin returned a malformed result; the message is one line naming it."""

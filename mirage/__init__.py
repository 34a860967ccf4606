"""MIRAGE: an experiment platform for multi-turn LLM-agent RL that diagnoses template collapse."""

from mirage.core.plugin_api import moved as _moved

_moved.install()  # earlier releases' module paths keep importing, with a deprecation warning

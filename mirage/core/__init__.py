"""Contracts, data model, run loop, store and CLI, a folder each; errors.py is the ground floor."""

from mirage import moved_paths as _moved_paths

_moved_paths.install()  # the flat paths of plugin API 1 keep importing, with a deprecation warning

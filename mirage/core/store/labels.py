"""The researcher's labels on a run (name, tags, note), checked in one place for ``core run
--name/--tag/--note`` and ``core rename``, ``tag`` and ``note`` alike: each bad one is one
ConfigError line naming the label and the rule, before the store is touched."""

from __future__ import annotations

import unicodedata

from mirage.core.errors import ConfigError

# Longest label of each kind: names and tags are shown in tables and picked in the app;
# a note is free text (a paragraph or a few), not a log.
LIMITS = {"name": 100, "tag": 64, "note": 10_000}
# Control characters a note may hold (it may have lines); names and tags hold none.
NOTE_CONTROLS = frozenset("\n\t")
# The tag of a stored probe (core probe): a policy measured, nothing trained.
PROBE_TAG = "probe"


def check_label(kind: str, value: str) -> str:
    """``value`` if it is a valid run ``kind`` (name, tag or note), else ConfigError: empty,
    only whitespace, holding control characters (a note may hold newlines and tabs), or
    longer than ``LIMITS[kind]``. (``core note RUN ""`` clears a note before this check.)"""
    if value == "":
        raise ConfigError(f"a run {kind} cannot be empty")
    if not value.strip():
        raise ConfigError(f"a run {kind} cannot be only whitespace ({value!r})")
    allowed = NOTE_CONTROLS if kind == "note" else frozenset()
    bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Cs") and c not in allowed), None)
    if bad is not None:
        raise ConfigError(f"a run {kind} cannot hold control characters (found {bad!r} in {value!r:.80})")
    if len(value) > LIMITS[kind]:
        raise ConfigError(f"a run {kind} is at most {LIMITS[kind]} characters (got {len(value)})")
    return value

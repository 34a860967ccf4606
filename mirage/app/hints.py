"""What the app says instead of a chart when the selected runs lack a metric."""

from __future__ import annotations

import streamlit as st

# metric-name prefix -> why it may be missing
_WHY = (
    ("mi/", "the `mi` diagnostic did not run in them (it is on by default: `diagnostics.names`)"),
    ("grad/", "the gradient-decomposition diagnostic did not run in them"),
    ("reward/", "the reward-structure diagnostic did not run in them"),
    ("val", "validation runs at step 0, every `validation.every` steps and at the last step"),
    ("update/", "update metrics start with the first update, at step 1"),
    ("filter/", "filter metrics start at step 1"),
)


def why_missing(name: str) -> str:
    """One sentence: which metric is missing and the likely reason."""
    reason = next((why for prefix, why in _WHY if name.startswith(prefix)), "no run logged it")
    return f"No `{name}` in the selected runs: {reason}."


def missing(name: str) -> None:
    st.info(why_missing(name), icon="ℹ️")

"""Whether a logger's library is installed, asked before a run starts."""

from __future__ import annotations

import importlib.util


def missing_library(module: str, extra: str) -> str | None:
    """A one-line reason when ``module`` cannot be imported, naming the extra that installs it."""
    if importlib.util.find_spec(module) is not None:
        return None
    return f"needs the {module} package: pip install 'mirage-rl[{extra}]'"

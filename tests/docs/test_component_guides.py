"""Each component guide names (in backquotes, or in its example as ``def NAME(``) every
method and class attribute its base class declares (the abstract ones and the optional
ones with their defaults), so a new optional method cannot land undocumented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirage.core.plugin_api.components import AdvantageEstimator, Algorithm, Diagnostic, Filter, Logger
from mirage.core.rl.backend import Backend

DOCS = Path(__file__).resolve().parents[2] / "docs"

GUIDES = {Backend: "writing-a-backend.md", Diagnostic: "writing-a-diagnostic.md",
          Filter: "writing-a-filter.md", Algorithm: "algorithms.md", AdvantageEstimator: "algorithms.md",
          Logger: "loggers.md"}


def declared(base: type) -> list[str]:
    """The public names the base class itself declares (methods and class attributes)."""
    names = [*vars(base), *getattr(base, "__annotations__", {})]
    return sorted({name for name in names if not name.startswith("_")})


@pytest.mark.parametrize("base", GUIDES, ids=lambda base: base.__name__)
def test_the_guide_names_everything_the_base_declares(base):
    text = (DOCS / GUIDES[base]).read_text()
    names = declared(base)
    assert names, f"{base.__name__} declares nothing?"
    missing = [name for name in names if not re.search(rf"`{name}\b|def {name}\(", text)]
    assert not missing, f"docs/{GUIDES[base]} does not name {base.__name__}'s {', '.join(missing)}"

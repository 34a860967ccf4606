"""The example plugin packages the guides in docs/ show, run from the docs' own code."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parents[2] / "docs"


def doc_module(doc: str, package: str) -> ModuleType:
    """The module written in docs/``doc`` as the ```python block that starts with
    ``# <package>/__init__.py``, executed as module ``package``."""
    path = DOCS / doc
    code = re.search(rf"```python\n(# {package}/__init__.py\n.*?)```", path.read_text(), re.S).group(1)
    module = ModuleType(package)
    exec(compile(code, str(path), "exec"), module.__dict__)
    return module

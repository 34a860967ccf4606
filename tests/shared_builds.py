"""What the xdist workers of one test run build once and share: a directory under the
run's base temporary directory, built under a file lock by whichever worker asks first
(the others wait and reuse it). Used by conftest's ``mirage_cache`` and by session
fixtures that cost seconds to build, such as tests/app's ``app_store``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

import pytest
from filelock import FileLock


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every worker of this test run shares (the run's base temporary
    directory; each xdist worker's own lies below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """``shared_root/name``, built by ``build(directory)`` once per test run: the first
    worker to ask builds it under a file lock, the others wait and reuse it. ``build``
    returns JSON-able data kept beside it (read back with ``built_data``)."""
    root = shared_root(tmp_path_factory)
    target, done = root / name, root / f"{name}.done.json"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            done.write_text(json.dumps(build(target)))
    return target


def built_data(directory: Path) -> object:
    return json.loads((directory.parent / f"{directory.name}.done.json").read_text())

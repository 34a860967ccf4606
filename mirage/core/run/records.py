"""The reproducibility record stored with every run: the code (git commit, whether the
work tree was dirty and a hash of its diff), the key package versions, the machine and
the threads chosen. The full resolved config is stored beside it (``runs.config``)."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

KEY_PACKAGES = ("mirage-rl", "torch", "transformers", "verl", "vllm", "numpy", "pluggy",
                "pydantic", "duckdb", "ray", "prefect")
_SOURCE = Path(__file__).resolve().parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=20, cwd=_SOURCE)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_record() -> dict[str, Any]:
    """``commit`` (None outside a git checkout), ``dirty`` (uncommitted changes to
    tracked files) and ``diff_sha256`` (of ``git diff HEAD``, to tell two dirty trees apart)."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "diff_sha256": None}
    diff = _git("diff", "HEAD") or ""
    return {"commit": commit.strip(), "dirty": bool(diff),
            "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None}


def git_commit() -> str | None:
    """The checkout's commit (None outside a git checkout)."""
    commit = _git("rev-parse", "HEAD")
    return commit.strip() or None if commit else None


def package_versions() -> dict[str, str | None]:
    """Installed versions of ``KEY_PACKAGES`` (None: not installed)."""
    versions: dict[str, str | None] = {}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine_record() -> dict[str, Any]:
    """Host, OS, CPU and GPU of this machine."""
    import torch

    gpus = ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if torch.cuda.is_available() else [])
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "gpus": gpus, "cuda": torch.version.cuda}


def environment_record(threads: dict[str, Any]) -> dict[str, Any]:
    """Everything above plus Python and ``threads`` (the count chosen and why)."""
    return {"git": git_record(), "python": sys.version.split()[0],
            "packages": package_versions(), "machine": machine_record(), "threads": threads}

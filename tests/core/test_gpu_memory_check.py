"""scripts/gpu_memory_check.py (docs/gpu.md) stops cleanly where there is no GPU, as here:
one line on stderr, exit 2, nothing on stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_without_a_gpu_the_memory_check_stops_with_one_line(tmp_path: Path):
    out = tmp_path / "check.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_memory_check.py"), "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=os.environ | {"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gpu_memory_check: no CUDA GPU visible") and "docs/gpu.md" in line
    assert done.stdout == "" and not out.exists()

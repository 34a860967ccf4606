"""The fast tier stays fast (issue #41): a test that is not marked ``slow`` and runs
longer than the limit fails the run with its name and time (tests/slow_guard.py); a
marked one does not. Run in a subprocess on a throwaway test file, with the limit
lowered so that a test sleeping half a second crosses it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

SLEEPER = '''
import time
import pytest

def test_quick():
    pass

{mark}
def test_sleeps():
    time.sleep(0.6)
'''


# under two workers: slow (a nested xdist run, about 8 s); the guard itself is in the fast tier
@pytest.mark.parametrize("mark,workers", [("", "0"), ("@pytest.mark.slow", "0"),
                                          pytest.param("", "2", marks=pytest.mark.slow)])
def test_an_unmarked_test_over_the_limit_fails_the_run(tmp_path: Path, mark: str, workers: str):
    (tmp_path / "test_sleeper.py").write_text(SLEEPER.format(mark=mark))
    (tmp_path / "conftest.py").write_text('pytest_plugins = ("slow_guard",)\n')
    env = {**os.environ, "MIRAGE_SLOW_LIMIT_S": "0.3", "PYTHONPATH": str(TESTS)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", workers,
                           "-o", "addopts=", "-q", "-W", "ignore::pytest.PytestConfigWarning",
                           str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    if mark:
        assert done.returncode == 0, done.stdout
        assert "over the fast tier's limit" not in done.stdout
    else:
        assert done.returncode == 1, done.stdout
        assert "2 passed" in done.stdout  # the tests themselves passed: the guard failed the run
        assert re.search(r"test_sleeper.py::test_sleeps: \d+\.\d s without @pytest.mark.slow \(limit 0.3 s",
                         done.stdout), done.stdout
        assert "test_quick" not in done.stdout.split("over the fast tier's limit")[1]

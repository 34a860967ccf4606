"""The command line away from a source checkout: the registry and the committed study ship
with the package (package data, links to the repository's files), the user's own
./registry.yaml wins, and a wheel carries both."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.slow  # builds a wheel and runs core outside the checkout: 9 s a case

REPO = Path(__file__).resolve().parents[2]


def core(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess:
    """``core ARGS`` run from ``cwd`` (with this process's environment)."""
    env = {k: v for k, v in os.environ.items() if k != "MIRAGE_REGISTRY"}
    return subprocess.run([sys.executable, "-m", "mirage", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_shipped_registry_is_found_outside_a_checkout(tmp_path):
    done = core(tmp_path, "experiments")
    assert done.returncode == 0, done.stderr
    names = {line.split(":")[0] for line in done.stdout.splitlines() if not line.startswith(" ")}
    assert names == set(yaml.safe_load((REPO / "registry.yaml").read_text())["experiments"])


def test_the_users_own_registry_is_found_first(tmp_path):
    (tmp_path / "registry.yaml").write_text(yaml.safe_dump({"experiments": {"mine": {
        "base": {"env": {"name": "frozenlake"}}, "grid": {"filter.rho": [0.5, 0.9]}}}}))
    done = core(tmp_path, "experiments")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("mine: 2 cells")
    assert len([line for line in done.stdout.splitlines() if not line.startswith(" ")]) == 1


def test_restore_outside_a_checkout_rebuilds_the_shipped_study(tmp_path):
    done = core(tmp_path, "report", "--restore", "study.duckdb")
    assert done.returncode == 0, done.stderr
    con = duckdb.connect(str(tmp_path / "study.duckdb"), read_only=True)
    try:
        restored = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    finally:
        con.close()
    assert restored == len(pd.read_parquet(REPO / "results" / "reproduction" / "runs.parquet")) > 0


def test_restore_from_a_folder_that_is_no_study_says_what_to_pass(tmp_path):
    (tmp_path / "empty").mkdir()
    done = core(tmp_path, "report", "--restore", "study.duckdb", "--results", "empty")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: empty is not an exported study (no schema.sql); pass --results FOLDER")
    assert "leave --results out for the study shipped with the package" in line
    assert not (tmp_path / "study.duckdb").exists()


@pytest.mark.slow
def test_a_wheel_ships_the_registry_and_the_study(tmp_path):
    source = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "registry.yaml"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "mirage", source / "mirage", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "results" / "reproduction", source / "results" / "reproduction")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "-w", tmp_path / "dist", source], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("mirage/registry.yaml") == (REPO / "registry.yaml").read_bytes()
        for part in (REPO / "results" / "reproduction").iterdir():
            assert archive.read(f"mirage/study/reproduction/{part.name}") == part.read_bytes()

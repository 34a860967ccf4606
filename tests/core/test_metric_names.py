"""docs/metrics.md and the metric names a run emits must agree."""

import re
from pathlib import Path

import pytest

from mirage.core.loop import execute
from mirage.core.store import RunStore
from mirage.core.validate import build_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented_names() -> set[str]:
    names: set[str] = set()
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([a-z_]+/[a-z_/]+)`", line.split("|")[1]))
    return names


@pytest.mark.slow
def test_emitted_metric_names_are_documented(tiny_config, tmp_path):
    data = tiny_config()
    data["filter"] = {"name": "none"}
    data["steps"] = 2
    db = tmp_path / "runs.duckdb"
    run_id = execute(build_config(data), db, progress=False)
    emitted = {name for _, name, _ in RunStore(db).metrics(run_id)}
    documented = documented_names()
    assert emitted - documented == set(), "emitted but undocumented"
    # Every documented name is emitted by this run (filter none, no KL: still logged as 0).
    assert documented - emitted == set(), "documented but never emitted"

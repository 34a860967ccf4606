"""``core run`` ends with a few lines on what the run did: validation success and
first-turn retrieval at the first and the last check, the filter's kept share, and where
the starting policy came from; ``--quiet`` prints only the result line."""

from __future__ import annotations

import re

from mirage.core.cli.run_summary import summary_lines
from mirage.core.store.run_store import RunStore


def test_a_run_ends_with_its_summary(cli, tiny_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--steps", "2")
    assert code == 0, err
    first, *summary = out.splitlines()
    run_id = re.fullmatch(rf"run (\S+) finished; results in {re.escape(str(db))}", first).group(1)
    store = RunStore(db)
    assert summary == summary_lines(store, run_id)
    (start, end) = [value for _, _, value in store.metrics(run_id, "val/success")]
    assert f"  validation success: {start:.3f} (step 0) -> {end:.3f} (step 2)" in summary
    assert any(line.startswith("  first-turn retrieval accuracy: ") and "(chance 0.500)" in line
               for line in summary)  # the tiny config's P = 2
    kept = [value for _, _, value in store.metrics(run_id, "filter/kept_ratio")]
    assert f"  groups kept by the filter: {sum(kept) / 2:.2f} on average " \
           f"({min(kept):.2f}-{max(kept):.2f}) over 2 steps" in summary
    assert summary[-1] in ("  starting policy: the cached warm start",
                           "  starting policy: a warm start trained for this run (cached for the next)")


def test_a_run_without_steps_has_no_summary(tmp_path):
    store = RunStore(tmp_path / "runs.duckdb")
    store.create_run("empty", {"steps": 1}, [], None)
    assert summary_lines(store, "empty") == []

"""The load step: cells' own DuckDB files into the main store (mirage/flows/load.py)."""

from __future__ import annotations

import json

import duckdb
import pytest

from mirage.core.config.run_config import config_hash
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import GroupRow, RunStore
from mirage.flows.cells import CellSpec
from mirage.flows.load import completed_runs, load_cell, ran_before, reused_cell
from mirage.flows.sweep_store import SweepStore
from mirage.flows.task import CELL_DB, OUTCOME, cell_dir

CONFIG = {"steps": 2, "seed": 0}


def resolved(**data):
    """A resolved config (as runs store and sweeps hash them) from keyword settings."""
    return build_config(data)


def spec(cell: str = "filter.name=top_p", config_hash: str = "abc123") -> CellSpec:
    return CellSpec("stochasticity", cell, 0, CONFIG, config_hash)


def write_cell(root, cell_spec: CellSpec, *, status="finished", run=True, error=None,
               config=CONFIG) -> str | None:
    """A cell directory as a finished (or failed) cell task leaves it."""
    directory = cell_dir(root, cell_spec)
    directory.mkdir(parents=True)
    run_id = None
    if run:
        run_id = f"run-{cell_spec.config_hash}"
        store = RunStore(directory / CELL_DB)
        store.create_run(run_id, CONFIG, [{"name": "mirage", "version": "0"}], None,
                         experiment=cell_spec.experiment, cell=cell_spec.cell, seed=cell_spec.seed)
        store.record_event(run_id, 0, "backend", "{}")
        for step, (success, kept) in enumerate([(0.25, 1.0), (0.5, 0.5), (0.75, 0.25)]):
            diagnosed = {"mi/first_turn/retrieval_acc": 0.9} if step == 1 else {}
            store.record_step(run_id, step, {"val/success": success, "filter/kept_ratio": kept,
                                             **diagnosed}, [GroupRow(0, 11, 0.5, 0.25, 0.5, True)])
        store.set_status(run_id, status, error)
    outcome = {"status": status, "run_id": run_id if status != "failed" else None, "error": error,
               "config": config, "config_hash": config and config_hash(config)}
    (directory / OUTCOME).write_text(json.dumps(outcome))
    return run_id


def test_a_finished_cell_is_imported_with_its_labels_and_summary(tmp_path, contents):
    root, main = tmp_path / "cells", RunStore(tmp_path / "main.duckdb")
    run_id = write_cell(root, spec())
    row = load_cell(main, spec(), root)
    run = main.get_run(run_id)
    assert (run["experiment"], run["cell"], run["seed"], run["status"]) == (
        "stochasticity", "filter.name=top_p", 0, "finished")
    assert len(main.metrics(run_id)) == 7 and len(main.groups(run_id)) == 3
    assert [e["kind"] for e in main.events(run_id)] == ["backend"]
    assert row == {"experiment": "stochasticity", "cell": "filter.name=top_p", "seed": 0,
                   "config_hash": "abc123", "run_id": run_id, "status": "finished", "reused": False,
                   "loaded": False, "error": None, "success": 0.75, "retrieval_acc": 0.9, "entropy": None,
                   "kept_ratio": 0.25}
    before = contents(main)
    again = load_cell(main, spec(), root, loaded=True)  # loading again copies nothing twice
    assert contents(main) == before
    assert again["loaded"] and again["run_id"] == run_id  # only loaded: counted apart from run


def test_a_cell_that_failed_before_its_run_existed_is_recorded_as_failed(tmp_path):
    root, main = tmp_path / "cells", RunStore(tmp_path / "main.duckdb")
    failing = spec("model.path=/nowhere", "def456")
    write_cell(root, failing, status="failed", run=False, error="OSError: no checkpoint at /nowhere")
    row = load_cell(main, failing, root)
    run = main.get_run(row["run_id"])
    assert (run["status"], run["error"], run["experiment"], run["cell"], run["seed"]) == (
        "failed", "OSError: no checkpoint at /nowhere", "stochasticity", "model.path=/nowhere", 0)
    assert run["config"] == CONFIG
    assert row["status"] == "failed" and row["error"] == "OSError: no checkpoint at /nowhere"


def test_a_run_that_failed_midway_keeps_its_steps(tmp_path):
    root, main = tmp_path / "cells", RunStore(tmp_path / "main.duckdb")
    write_cell(root, spec(), status="failed", error="RuntimeError: boom at step 2")
    row = load_cell(main, spec(), root)
    assert row["run_id"] == "run-abc123" and row["status"] == "failed"
    assert main.get_run("run-abc123")["error"] == "RuntimeError: boom at step 2"
    assert len(main.metrics("run-abc123", "val/success")) == 3


def test_only_completed_runs_are_reused_by_config_hash(tmp_path):
    root, main = tmp_path / "cells", RunStore(tmp_path / "main.duckdb")
    config = resolved(steps=2).model_dump(mode="json")
    main.create_run("done", config, [], None)
    main.set_status("done", "finished")
    main.create_run("broken", resolved(steps=3).model_dump(mode="json"), [], None)
    main.set_status("broken", "failed", "boom")
    cache = completed_runs(main)
    assert cache == {resolved(steps=2).run_hash(): "done"}
    row = reused_cell(main, spec(config_hash=resolved(steps=2).run_hash()), "done")
    assert row["reused"] and row["run_id"] == "done" and row["status"] == "finished"


def test_a_run_stored_before_a_setting_existed_is_still_reused(tmp_path):
    """Its stored config lacks the setting; at its default the hash is the same, so the
    cache holds. A run that differs in any value is not reused."""
    main = RunStore(tmp_path / "main.duckdb")
    older = resolved(steps=2).model_dump(mode="json")
    del older["validation"]["seed"]  # as stored before the setting was added
    main.create_run("old", older, [], None)
    main.set_status("old", "finished")
    assert completed_runs(main) == {resolved(steps=2).run_hash(): "old"}
    changed = resolved(steps=2, model={"options": {"warmstart_env_options": {"slip": 0.0}}}).run_hash()
    assert changed not in completed_runs(main)
    assert resolved(steps=2, seed=1).run_hash() != resolved(steps=2).run_hash()


def test_a_run_of_an_earlier_results_version_is_never_reused(tmp_path):
    """A run stored before results_version existed (or under another one) ran under other
    semantics (earlier demonstrations, veRL's float32 advantages): same config, no reuse."""
    from mirage.core.config.run_config import RESULTS_VERSION

    main = RunStore(tmp_path / "main.duckdb")
    older = resolved(steps=2).model_dump(mode="json")
    assert older.pop("results_version") == RESULTS_VERSION
    main.create_run("old", older, [], None)
    main.set_status("old", "finished")
    assert resolved(steps=2).run_hash() not in completed_runs(main)
    with pytest.raises(ValueError):
        resolved(results_version=RESULTS_VERSION - 1)


def test_a_cell_left_unloaded_is_only_reused_for_the_config_it_ran(tmp_path):
    """Cell directories are named by a hash that leaves defaults out, so after a default
    changed the directory of a default config may hold a run of the old default: the
    hash its outcome recorded tells them apart. An outcome written before outcomes
    recorded their hash is run again."""
    root = tmp_path / "cells"
    now = resolved(steps=2).model_dump(mode="json")
    before = resolved(steps=2, model={"options": {"warmstart_steps": 7}}).model_dump(mode="json")
    current = CellSpec("e", "c", 0, now, resolved(steps=2).run_hash())
    write_cell(root, current, config=before)  # what an older default left under this name
    assert not ran_before(root, current)
    other = CellSpec("e", "c", 1, now | {"seed": 1}, resolved(steps=2, seed=1).run_hash())
    write_cell(root, other, config=now | {"seed": 1})
    assert ran_before(root, other)
    legacy = json.loads((cell_dir(root, other) / OUTCOME).read_text())
    del legacy["config_hash"]
    (cell_dir(root, other) / OUTCOME).write_text(json.dumps(legacy))
    assert not ran_before(root, other)
    failed = CellSpec("e", "c", 2, now | {"seed": 2}, resolved(steps=2, seed=2).run_hash())
    write_cell(root, failed, status="failed", run=False, config=now | {"seed": 2})
    assert not ran_before(root, failed)
    legacy = CellSpec("e", "c", 3, now | {"seed": 3}, resolved(steps=2, seed=3).run_hash())
    write_cell(root, legacy, config=None)  # an outcome from before configs were recorded
    assert not ran_before(root, legacy)


def test_sweep_summary_rows_are_stored(tmp_path):
    sweeps = SweepStore(tmp_path / "main.duckdb")
    assert sweeps.sweep_cells() == []
    sweeps.start_sweep("s1", "e", [{"sweep_id": "s1", "experiment": "e", "cell": "c", "seed": 0,
                                    "config_hash": "h", "run_id": "r", "status": "finished",
                                    "reused": False, "error": None, "success": 0.5}],
                       host="here", pid=1)
    (row,) = sweeps.sweep_cells("s1")
    assert (row["cell"], row["success"], row["entropy"], row["reused"]) == ("c", 0.5, None, False)


def test_importing_reads_the_cell_file_while_others_read_it(tmp_path):
    root, main = tmp_path / "cells", RunStore(tmp_path / "main.duckdb")
    write_cell(root, spec())
    cell_db = cell_dir(root, spec()) / CELL_DB
    reader = duckdb.connect(str(cell_db), read_only=True)  # another reader of the cell file
    try:
        assert main.import_runs(cell_db) == ["run-abc123"]
    finally:
        reader.close()

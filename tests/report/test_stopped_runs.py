"""A study's runs that stopped themselves (a stop rule fired, e.g. the filter kept no group
for ``max_empty_steps`` steps) are exported with the finished ones and read apart from
them; an interrupted run (status ``stopped`` without a stop event) is not exported."""

from __future__ import annotations

import pytest

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore
from mirage.report import visual
from mirage.report.results import export_study, read_study

RULE = "filter 'top_p' kept no group for 5 steps in a row"


def _run(store: RunStore, run_id: str, seed: int, flt: dict, last: int) -> None:
    config = RunConfig().model_dump(mode="json")
    config.update(seed=seed, steps=20, filter={**config["filter"], **flt},
                  env={**config["env"], "name": "sokoban", "options": {"observation": "image"}})
    store.create_run(run_id, config, [], None, experiment="visual", seed=seed)
    for step in range(0, last + 1, 5):
        store.record_step(run_id, step, {"val/success": 0.1 - step / 400, "mi/first_turn/retrieval_acc": 0.9})


@pytest.fixture
def results(tmp_path):
    store = RunStore(tmp_path / "runs.duckdb")
    top_p = {"name": "top_p", "rho": 0.9}
    for seed in (0, 1):
        _run(store, f"none-{seed}", seed, {"name": "none"}, 20)
        store.set_status(f"none-{seed}", "finished")
    _run(store, "topp-0", 0, top_p, 15)  # a stop rule fired at step 15
    store.record_event("topp-0", 15, "stopped", RULE)
    store.set_status("topp-0", "stopped", f"run topp-0: {RULE}")
    _run(store, "topp-1", 1, top_p, 10)  # interrupted (Ctrl-C): no stop event
    store.set_status("topp-1", "stopped", "interrupted")
    assert export_study(tmp_path / "runs.duckdb", tmp_path / "results", ("visual",)) == {"visual": 3}
    return tmp_path / "results"


def test_self_stopped_runs_are_read_apart_from_finished_ones(results):
    study = read_study(results)
    assert sorted(study.runs["run_id"]) == ["none-0", "none-1"]
    assert set(study.metrics["run_id"]) == {"none-0", "none-1"}
    assert list(study.stopped["run_id"]) == ["topp-0"]  # the interrupted run is not exported
    assert int(study.stopped["last_step"].iloc[0]) == 15
    assert set(study.stopped_metrics["run_id"]) == {"topp-0"}
    assert study.of("visual").stopped["run_id"].tolist() == ["topp-0"]
    assert study.of("other").stopped.empty


def test_the_visual_section_counts_them_and_pairs_only_finished_runs(results):
    [finding] = visual.visual_study(read_study(results))
    assert any(line.startswith("1 run(s) stopped themselves") and "seed 0 at step 15" in line
               for line in finding.evidence)
    caption, table = next(t for t in finding.tables if t[0].startswith("Runs that stopped themselves"))
    assert f"| sokoban | image | {visual.LINEAR} | 0 | 15 | {RULE} | 0.062 | 15 | 0.900 |" in table
    assert not finding.checks  # the only filtered run stopped: nothing left to pair

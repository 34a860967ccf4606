"""Planning a sweep: cells, overrides, presets, refusal before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mirage.core.config.presets import TINY
from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.flows.cells import cell_root, plan_cells

REPO = Path(__file__).resolve().parents[2]


def test_cells_of_a_shrunk_stochasticity_grid():
    cells = plan_cells("stochasticity", REPO / "registry.yaml", grid={"env.options.slip": [0.0, 0.5]},
                       settings={"filter.name": "top_p"}, seeds=[0, 1], preset="tiny")
    assert [(c.cell, c.seed) for c in cells] == [  # seed-major
        ("env.options.slip=0.0", 0), ("env.options.slip=0.5", 0),
        ("env.options.slip=0.0", 1), ("env.options.slip=0.5", 1)]
    for cell in cells:
        config = RunConfig.model_validate(cell.config)
        assert cell.config_hash == config.run_hash()  # the cache key
        assert cell.experiment == "stochasticity" and config.seed == cell.seed
        assert config.model.options["hidden"] == TINY["model"]["options"]["hidden"] and config.threads == 1
        assert config.filter.name == "top_p" and config.env.name == "frozenlake"
    assert len({c.config_hash for c in cells}) == 4


def test_unknown_experiment_and_preset_list_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown experiment 'stochastic'; valid: .*stochasticity"):
        plan_cells("stochastic", REPO / "registry.yaml")
    with pytest.raises(ConfigError, match=r"unknown preset 'small'; valid: tiny"):
        plan_cells("rho", REPO / "registry.yaml", preset="small")


def test_an_experiment_needing_a_missing_component_refuses_to_start(tmp_path):
    registry = tmp_path / "registry.yaml"
    registry.write_text(yaml.safe_dump({"experiments": {"later": {
        "grid": {"env.name": ["sokoban", "webshop_not_here"], "filter.name": ["none"]}}}}))
    with pytest.raises(ConfigError) as info:
        plan_cells("later", registry)
    assert str(info.value).startswith("experiment 'later' cannot start: cell 'env.name=webshop_not_here")
    assert "unknown env 'webshop_not_here'; valid: " in str(info.value)


def test_cells_write_beside_the_main_store(tmp_path):
    assert cell_root(tmp_path / "runs" / "main.duckdb") == (tmp_path / "runs" / "cells").resolve()


def test_core_sweep_refuses_bad_input_before_prefect_starts(cli, tmp_path):
    code, out, err = cli("sweep", "stochastic", "--db", tmp_path / "main.duckdb")
    assert code == 2 and "unknown experiment 'stochastic'; valid:" in err
    code, out, err = cli("sweep", "rho", "--set", "filter.rhoo=0.5")
    assert code == 2 and "filter.rhoo" in err
    code, out, err = cli("sweep", "rho", "--runner", "slurm")
    assert code == 2 and "unknown runner 'slurm'; valid: process, thread, ray" in err
    for command in ("sweep", "serve"):  # a local Ray listens on every interface: asked for by name only
        args = ("rho",) if command == "sweep" else ()
        code, out, err = cli(command, *args, "--runner", "ray", "--db", tmp_path / "main.duckdb")
        assert code == 2 and "--runner ray without --ray-address would start a local Ray" in err, err
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "main.duckdb").exists()


def test_the_flow_itself_refuses_a_local_ray_not_asked_for_by_name():
    from mirage.core.errors import ConfigError
    from mirage.flows.runners import make_task_runner

    with pytest.raises(ConfigError, match="--runner ray without --ray-address"):
        make_task_runner("ray", 2, None)
    assert make_task_runner("ray", 2, "local") is not None


def test_core_serve_refuses_a_malformed_registry(cli, tmp_path):
    registry = tmp_path / "registry.yaml"
    registry.write_text(yaml.safe_dump({"experiments": {"bad": {"grid": {"nosuch": [1]}}}}))
    code, out, err = cli("serve", "--registry", registry)
    assert code == 2 and "experiment 'bad'" in err and "nosuch" in err


def test_cells_on_several_workers_need_data_parallel_configs():
    from mirage.flows.cells import check_cell_workers

    cells = plan_cells("stochasticity", REPO / "registry.yaml", grid={"env.options.slip": [0.0]}, seeds=[0],
                       preset="tiny")
    check_cell_workers(1, cells)
    with pytest.raises(ConfigError, match=r"cell_workers 2 runs each cell data-parallel, which needs "
                                          r"model.parallel: ddp or fsdp \(--set model.parallel=ddp\)"):
        check_cell_workers(2, cells)
    check_cell_workers(2, plan_cells("stochasticity", REPO / "registry.yaml", grid={"env.options.slip": [0.0]},
                                     seeds=[0], preset="tiny", settings={"model.parallel": "ddp"}))


@pytest.mark.slow
@pytest.mark.xdist_group("busy")  # busy processes: one such test at a time
def test_a_cell_runs_on_two_processes_into_its_own_store(tmp_path):
    from mirage.core.store.run_store import RunStore
    from mirage.flows.cells import CELL_DB, cell_dir
    from mirage.flows.task import execute_cell

    spec = plan_cells("stochasticity", REPO / "registry.yaml", grid={"env.options.slip": [0.0]}, seeds=[0],
                      preset="tiny", settings={"model.parallel": "ddp", "steps": 2})[0]
    outcome = execute_cell(spec, tmp_path, workers=2)
    assert outcome["status"] == "finished", outcome["error"]
    store = RunStore(cell_dir(tmp_path, spec) / CELL_DB)
    (run,) = store.list_runs()
    assert (run["run_id"], run["experiment"], run["cell"]) == (outcome["run_id"], spec.experiment, spec.cell)
    assert any(e["kind"] == "ranks" for e in store.events(run["run_id"]))


class _Killed(BaseException):
    """Stands in for the SIGKILL that ends a sweep mid-cell (no outcome gets written)."""


def test_a_killed_cell_resumes_from_its_checkpoint_and_a_finished_or_foreign_one_starts_over(tmp_path):
    from mirage.core.run.loop import execute
    from mirage.core.store.run_store import RunStore
    from mirage.flows.cells import CELL_DB, cell_dir
    from mirage.flows.task import execute_cell, unfinished_run

    spec = plan_cells("stochasticity", REPO / "registry.yaml", grid={"env.options.slip": [0.0]}, seeds=[0],
                      preset="tiny", settings={"steps": 4, "checkpoint_every": 2, "max_empty_steps": 50})[0]
    directory = cell_dir(tmp_path, spec)
    directory.mkdir(parents=True)
    db = directory / CELL_DB

    def killed(step, metrics):
        if step == 3:
            raise _Killed  # after the checkpoint of step 2
    with pytest.raises(_Killed):
        execute(RunConfig.model_validate(spec.config), db, progress=False, experiment=spec.experiment,
                cell=spec.cell, on_step=killed)
    (row,) = RunStore(db).list_runs()
    assert unfinished_run(directory, spec) == row["run_id"]
    other = plan_cells("stochasticity", REPO / "registry.yaml", grid={"env.options.slip": [0.0]}, seeds=[1],
                       preset="tiny", settings={"steps": 4, "checkpoint_every": 2, "max_empty_steps": 50})[0]
    assert unfinished_run(directory, other) is None  # another config's run is never taken over

    outcome = execute_cell(spec, tmp_path)
    assert (outcome["status"], outcome["run_id"]) == ("finished", row["run_id"]), outcome["error"]
    store = RunStore(db)
    (done,) = store.list_runs()
    assert (done["last_step"], done["experiment"], done["cell"]) == (4, spec.experiment, spec.cell)
    assert [e["step"] for e in store.events(row["run_id"]) if e["kind"] == "resumed"] == [2]
    steps = [s for s, name, _ in store.metrics(row["run_id"]) if name == "train/return"]
    assert steps == list(range(5))  # the steps after the checkpoint recomputed, none twice
    # a cell with an outcome is done (or failed): a later attempt starts it over
    assert unfinished_run(directory, spec) is None

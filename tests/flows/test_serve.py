"""The two-terminal workflow end to end: a real Prefect server, `core serve`, and
`prefect deployment run sweep/stochasticity --watch`, twice (the second reuses every cell)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mirage.core.store.run_store import RunStore
from mirage.flows.sweep_store import SweepStore
from shared_runs import core_serve_own_server

from .conftest import api_get, kill_tree

REPO = Path(__file__).resolve().parents[2]
PARAMS = [
    "--param", "preset=tiny",
    "--param", 'grid={"env.options.slip": [0.0, 0.5]}',
    "--params", json.dumps({"settings": {"filter.name": "top_p", "steps": 2, "threads": 1}}),
]


def deployment_run(server, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    done = subprocess.run(
        [sys.executable, "-m", "prefect", "deployment", "run", "sweep/stochasticity", "--watch", *args],
        env=server.env(COLUMNS="1000"), cwd=REPO, capture_output=True, text=True, timeout=400,
    )
    found = re.search(r"UUID: ([0-9a-f-]{36})", done.stdout)
    assert found, done.stdout + done.stderr
    return done, found.group(1)


def final_message(server, flow_run_id: str) -> str:
    status, body = api_get(f"{server.api_url}/flow_runs/{flow_run_id}")
    assert status == 200
    return body["state"]["message"]


@pytest.mark.slow
@pytest.mark.xdist_group("busy")  # busy processes: one such test at a time
def test_deployment_run_sweep_twice_recomputes_nothing(prefect_server, tmp_path, cli_argv, contents):
    db = tmp_path / "runs" / "main.duckdb"
    log = open(tmp_path / "serve.log", "w")
    serve = subprocess.Popen(cli_argv("serve", "--db", db, "--width", "2"), env=prefect_server.env(),
                             cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        names = ("stochasticity", "rho", "pxg", "sampling", "filters")  # one per experiment
        while any(api_get(f"{prefect_server.api_url}/deployments/name/sweep/{name}")[0] != 200
                  for name in names):
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "core serve did not register its deployments"
            time.sleep(1)

        first, first_id = deployment_run(prefect_server, *PARAMS)
        assert first.returncode == 0, first.stdout + first.stderr + (tmp_path / "serve.log").read_text()[-3000:]
        assert final_message(prefect_server, first_id) == "stochasticity: 2 cells: 2 run, 0 loaded, 0 reused, 0 failed"
        store = RunStore(db)
        runs = store.list_runs()
        assert sorted((r["experiment"], r["cell"], r["seed"], r["status"]) for r in runs) == [
            ("stochasticity", "env.options.slip=0.0", 0, "finished"),
            ("stochasticity", "env.options.slip=0.5", 0, "finished")]
        for run in runs:
            assert run["config"]["filter"]["name"] == "top_p" and run["config"]["steps"] == 2
            assert [s for s, _, _ in store.metrics(run["run_id"], "val/success")] == [0, 2]
        first_summary = SweepStore(db).sweep_cells()
        assert len(first_summary) == 2 and not any(r["reused"] for r in first_summary)
        before = contents(store)

        second, second_id = deployment_run(prefect_server, *PARAMS)
        assert second.returncode == 0, second.stdout + second.stderr
        assert final_message(prefect_server, second_id) == "stochasticity: 2 cells: 0 run, 0 loaded, 2 reused, 0 failed"
        assert contents(store) == before  # no run, metric, group, event or rollout was added
        second_summary = [r for r in SweepStore(db).sweep_cells() if r["sweep_id"] == second_id]
        assert len(second_summary) == 2 and all(r["reused"] for r in second_summary)
        assert {r["run_id"] for r in second_summary} == {r["run_id"] for r in runs}

        # A failing cell: `--watch` prints its progress line and the final state's
        # message, which names the cell and its one-line reason, and exits 1. On the
        # thread runner: a pool worker's start (its own torch import) adds nothing to that.
        broken = tmp_path / "broken-model"
        broken.mkdir()
        (broken / "config.json").write_text('{"model_type": "qwen2"}')
        (broken / "model.safetensors").write_text("not safetensors")
        failing = ["--param", "preset=tiny", "--param", "runner=thread",
                   "--param", "grid=" + json.dumps({"model.path": [str(broken)]}),
                   "--params", json.dumps({"settings": {"filter.name": "top_p", "steps": 2, "threads": 1,
                                                        "env.options.slip": 0.0}})]
        third, third_id = deployment_run(prefect_server, *failing)
        assert third.returncode == 1, third.stdout + third.stderr
        message = final_message(prefect_server, third_id)
        assert message.startswith("stochasticity: 1 cells: 0 run, 0 loaded, 0 reused, 1 failed; first failure: "
                                  f"model.path={broken} seed=0: SafetensorError"), message
        assert message in third.stdout, third.stdout
        assert f"[1/1] model.path={broken} seed=0: failed (SafetensorError" in third.stdout, third.stdout
    finally:
        kill_tree(serve)
        log.close()


@pytest.mark.slow
@pytest.mark.xdist_group("busy")  # busy processes: one such test at a time
def test_core_serve_starts_and_stops_its_own_server(tmp_path_factory, cli_argv):
    # the serve whose sockets tests/core/test_listening_sockets.py checks (tests/shared_runs.py):
    # started without PREFECT_API_URL, sent SIGTERM alone once its deployments are served
    served = core_serve_own_server(tmp_path_factory, cli_argv)
    assert served.registered, "core serve did not start a server and serve\n" + served.log[-3000:]
    assert served.servers, served.log[-3000:]
    assert served.exit_code is not None  # it stopped within 30 s of SIGTERM
    assert not served.outlived, served.outlived  # and stopped its server
    assert served.health_after == 0
    assert f"export PREFECT_API_URL=http://127.0.0.1:{served.port}/api" in served.log

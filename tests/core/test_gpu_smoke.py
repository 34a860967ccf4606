"""scripts/gpu_smoke.sh stops cleanly where there is no GPU (as here), and its read-back
(scripts/gpu_smoke_report.py) checks the sampler/scorer agreement of a stored run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_smoke_report", REPO / "scripts" / "gpu_smoke_report.py")
smoke = importlib.util.module_from_spec(spec)
spec.loader.exec_module(smoke)


def test_without_a_gpu_the_smoke_script_stops_with_one_line(tmp_path: Path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "smoke"
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_smoke.sh"), str(model)], capture_output=True,
                          text=True, timeout=300, env=os.environ | {
                              "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "MIRAGE_SMOKE_DIR": str(out)})
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gpu_smoke: no CUDA GPU visible") and "install.sh --gpu" in line
    assert done.stdout == "" and not out.exists()


def steps(kl: dict[int, float], abs_diff: float = 0.03) -> dict[int, dict[str, float]]:
    return {s: {smoke.KL: v, smoke.ABS_DIFF: abs_diff, "time/step": 2.0 + s} for s, v in kl.items()}


def test_a_steady_bf16_gap_passes():
    assert smoke.agreement_problems(steps({0: 0.002, 1: 0.002, 2: 0.0025, 3: 0.002, 4: 0.003, 5: 0.002})) == []


def test_a_gap_that_grows_after_the_first_update_points_at_the_sync():
    (problem,) = smoke.agreement_problems(steps({0: 0.002, 1: 0.002, 2: 0.012, 3: 0.015, 4: 0.016, 5: 0.018}))
    assert "synced after every update" in problem


def test_a_gap_above_the_thresholds_is_reported():
    problems = smoke.agreement_problems(steps({0: 0.002, 1: 0.002, 2: 0.002}, abs_diff=0.5))
    assert len(problems) == 1 and "above the thresholds" in problems[0]


def test_an_iteration_without_the_agreement_metrics_is_reported():
    data = steps({0: 0.002, 1: 0.002, 2: 0.002})
    data[3] = {"time/step": 2.0}
    (problem,) = smoke.agreement_problems(data)
    assert "expected [1, 2, 3]" in problem


def stored_run(tmp_path: Path, kl: dict[int, float]) -> Path:
    db = tmp_path / "smoke.duckdb"
    store = RunStore(db)
    store.create_run("r1", RunConfig().model_dump(mode="json"), [], None, seed=0, name="gpu-smoke-1")
    for step, metrics in steps(kl).items():
        store.record_step("r1", step, metrics)
    return db


@pytest.mark.parametrize("kl, code", [({0: 0.002, 1: 0.002, 2: 0.002}, 0), ({0: 0.002, 1: 0.002, 2: 0.5}, 1)])
def test_the_report_writes_timings_and_fails_on_a_bad_gap(tmp_path: Path, capsys, kl, code):
    out = tmp_path / "timings.json"
    assert smoke.main([str(stored_run(tmp_path, kl)), "gpu-smoke-1", "MODEL", "100.0", "112.5", str(out)]) == code
    report = json.loads(out.read_text())
    assert report["run_id"] == "r1" and report["wall_seconds"] == 12.5
    assert report["mean_seconds_per_step"] == {"time/step": 3.0}
    assert report["sampler_kl"] == {str(s): v for s, v in kl.items()}
    assert bool(report["problems"]) == bool(code)
    if code:
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("gpu_smoke: ")

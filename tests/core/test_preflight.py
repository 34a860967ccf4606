"""``core preflight`` (mirage/core/run/preflight.py): PAPER.md section 4's predictor,
Std(RV)/Mean(RV) over one rollout batch, with a verdict on whether filtering helps."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from mirage.core.cli.program import app
from mirage.core.errors import ConfigError
from mirage.core.run.loop import execute
from mirage.core.run.preflight import (
    CV_THRESHOLD, HELPS, HURTS, NO_SIGNAL, PreflightReport, predict, run_preflight,
)
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore


def report(variances: list[float]) -> PreflightReport:
    return PreflightReport(env="frozenlake", prompts=len(variances), group_size=4, seed=0,
                           variances=variances, success=0.5, mean_return=0.25,
                           verdict=predict(variances))


# --------------------------------------------------------------------------- the predictor


def test_bimodal_variance_predicts_that_filtering_helps():
    # half the prompts without signal: mean 0.125, population std 0.125 -> 1.0
    verdict = predict([0.25, 0.0, 0.25, 0.0])
    assert verdict.likely_helps is True and verdict.text == HELPS
    assert "1.00" in verdict.reason and "2 of 4 have none" in verdict.reason


def test_even_variance_predicts_that_filtering_hurts():
    # mean 0.2, population std 0.05: cv 0.25
    verdict = predict([0.15, 0.25, 0.15, 0.25])
    assert verdict.likely_helps is False and verdict.text == HURTS
    assert "0.25" in verdict.reason and "random" in verdict.text


def test_threshold_is_exclusive():
    # values 0.5 and 1.5: mean 1, std 0.5 -> exactly the threshold: not "helps"
    assert CV_THRESHOLD == 0.5
    assert predict([0.5, 1.5]).likely_helps is False
    assert predict([0.49, 1.51]).likely_helps is True


def test_no_variance_at_all_is_its_own_verdict():
    verdict = predict([0.0, 0.0, 0.0])
    assert verdict.likely_helps is None and verdict.text == NO_SIGNAL
    assert "zero reward variance" in verdict.reason


def test_report_statistics_and_histogram():
    r = report([0.0, 0.0, 0.1, 0.2, 0.2, 0.5])
    assert r.rv_mean == pytest.approx(1.0 / 6)
    assert r.zero_variance_share == pytest.approx(2 / 6)
    assert r.rv_cv == pytest.approx(r.rv_std / r.rv_mean)
    rows = r.histogram(bins=5, width=10)
    # bins of width 0.1 over (0, 0.5]: 0.1 -> (0, 0.1]; 0.2 x 2 -> (0.1, 0.2]; 0.5 -> last
    counts = [int(row.rsplit("|", 1)[1]) for row in rows]
    assert counts == [2, 1, 2, 0, 0, 1]
    assert rows[0].lstrip().startswith("RV = 0")
    assert rows[0].count("#") == 10 and rows[1].count("#") == 5


def test_render_shows_every_part():
    text = report([0.25, 0.0, 0.25, 0.0]).render()
    for fragment in ["reward variance (RV) per prompt", "RV = 0", "Std(RV)/Mean(RV): 1.000",
                     "zero-variance prompts: 50% (2 of 4)", f"verdict: {HELPS}", "reason: "]:
        assert fragment in text
    assert "undefined" in report([0.0, 0.0]).render()
    assert math.isnan(report([0.0, 0.0]).rv_cv)


def test_group_size_one_is_refused_before_any_work(tiny_config):
    data = tiny_config()
    data["rollout"]["group_size"] = 1
    with pytest.raises(ConfigError, match="group size >= 2"):
        run_preflight(build_config(data))


def test_cli_bad_input_exits_2_with_one_line(tiny_config_file, tmp_path):
    runner = CliRunner()
    for args, fragment in [
        (["--group-size", "1"], "group size >= 2 (got 1)"),
        (["--env", "nosuch"], "valid: countdown, deepcoder, frozenlake, metamathqa, searchqa, sokoban, webshop"),
        (["--env-opt", "slip=2"], "slip"),
    ]:
        result = runner.invoke(app, ["preflight", "--config", str(tiny_config_file), *args])
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0]
        assert result.stdout == ""


# --------------------------------------------------------------------------- real batches


@pytest.mark.slow
@pytest.mark.parametrize("env", ["frozenlake", "sokoban"])
def test_preflight_on_a_tiny_policy(env, tiny_config):
    data = tiny_config()
    data["env"] = {"name": env}
    data["rollout"] |= {"prompts": 3, "group_size": 3}
    r = run_preflight(build_config(data))
    assert (r.env, r.prompts, r.group_size) == (env, 3, 3)
    assert len(r.variances) == 3 and all(v >= 0 for v in r.variances)
    assert 0.0 <= r.success <= 1.0
    assert r.verdict == predict(r.variances)
    assert "parameters" in r.facts


@pytest.mark.slow
def test_preflight_is_the_batch_a_run_sees_at_step_0(tiny_config, tmp_path):
    data = tiny_config()
    data["steps"] = 1
    config = build_config(data)
    db = tmp_path / "runs.duckdb"
    run_id = execute(config, db, progress=False)
    stored = [g["reward_variance"] for g in RunStore(db).groups(run_id, step=0)]
    assert run_preflight(config).variances == pytest.approx(stored)


@pytest.mark.slow
@pytest.mark.parametrize("env", ["frozenlake", "sokoban"])
def test_preflight_command(env, cli, tiny_config_file, tmp_path):
    code, out, err = cli("preflight", "--config", tiny_config_file, "--env", env,
                         "--prompts", "3", "--group-size", "2", "--seed", "1")
    assert code == 0, err
    assert f"preflight: {env}, P = 3 prompts x G = 2 rollouts, seed 1" in out
    for fragment in ["RV = 0", "Std(RV)/Mean(RV):", "zero-variance prompts:", "verdict: ", "reason: "]:
        assert fragment in out
    assert not (tmp_path / "default-db").exists(), "preflight wrote a run store"

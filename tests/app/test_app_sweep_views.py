"""Views of diagnostics a tiny run may not reach (gradient buckets, reward shares, collapse
alarms, correlations over runs) and of sweeps with replicates, on a store written through
the RunStore API with hand-checked values."""

from __future__ import annotations

import math

import pytest
from app_testing import chart_alarms, chart_data, open_app, rerun

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import GroupRow, RunStore

# run -> (slip, filter, seed, final val/success, final val/return)
RUNS = {
    "r0": (0.0, "none", 0, 0.1, 0.5),
    "r1": (0.0, "none", 1, 0.4, 0.7),
    "r2": (0.5, "top_p", 0, 0.3, 0.2),
    "r3": (0.5, "top_p", 1, 0.8, 0.4),
}
# mi_est at steps 1..4: the last value ranks the runs as final success does, steps 1-2 reversed
MI_EST = {"r0": [0.9, 0.9, 0.1, 0.1], "r1": [0.3, 0.3, 0.2, 0.4],
          "r2": [0.5, 0.5, 0.3, 0.3], "r3": [0.1, 0.1, 0.5, 0.9]}
ENTROPY = {"r0": 4.0, "r1": 1.0, "r2": 2.0, "r3": 0.5}  # ranks reversed: Spearman -1
GRAD = {("q1", "task"): [2.0, 4.0], ("q1", "entropy"): [1.0, 1.0], ("all", "kl"): [0.5, 1.5]}
SHARES = {"hard": [1.0, 0.8, 0.5, 0.5, 0.2, 0.0], "easy": [0.0, 0.0, 0.1, 0.3, 0.4, 0.6]}


@pytest.fixture
def grid_store(tmp_path):
    store = RunStore(tmp_path / "grid.duckdb")
    for run_id, (slip, filter_name, seed, success, ret) in RUNS.items():
        config = RunConfig.model_validate({
            "env": {"name": "frozenlake", "options": {"slip": slip}},
            "filter": {"name": filter_name}, "seed": seed, "steps": 5,
        }).model_dump(mode="json")
        store.create_run(run_id, config, [], None, experiment="stochasticity", seed=seed)
        for step in range(6):
            metrics = {"filter/kept_ratio": 1.0, "reward/hard_share": SHARES["hard"][step],
                       "reward/easy_share": SHARES["easy"][step],
                       "reward/mixed_share": 1 - SHARES["hard"][step] - SHARES["easy"][step]}
            if 1 <= step <= 4:
                metrics |= {"mi/first_turn/mi_est": MI_EST[run_id][step - 1],
                            "mi/first_turn/h_cond": 3.0, "update/entropy": ENTROPY[run_id]}
            if step in (2, 4):
                metrics |= {f"grad/{b}/{t}/total": v[step // 2 - 1] for (b, t), v in GRAD.items()}
            if step in (0, 5):
                metrics |= {"val/success": success if step == 5 else 0.0,
                            "val/return": ret if step == 5 else 0.0}
            groups = [GroupRow(0, 1, 0.5, 0.25 * (step % 2), 0.5 * (step % 2), True)]
            store.record_step(run_id, step, metrics, groups)
        store.set_status(run_id, "finished")
    store.record_event("r1", 3, "collapse_alarm", "retrieval accuracy at chance for 3 checks")
    return store


def test_gradient_norms_per_bucket_and_term(grid_store, monkeypatch):
    at = open_app(grid_store.path, monkeypatch)
    bars = chart_data(at)["Gradient norm per bucket and term"]
    assert set(bars["run_id"]) == set(RUNS)
    r0 = bars[bars["run_id"] == "r0"]
    means = {(b, t): v for b, t, v in zip(r0["bucket"], r0["term"], r0["value"])}
    assert means == {key: sum(values) / 2 for key, values in GRAD.items()}
    at.radio(key="grad_norm").set_value("per_token")
    assert "Gradient norm per bucket and term" not in chart_data(rerun(at))
    assert any("grad/*/*/per_token" in info.value for info in at.info)


def test_reward_shares_early_middle_late(grid_store, monkeypatch):
    at = open_app(grid_store.path, monkeypatch)
    shares = chart_data(at)["Hard / mixed / easy prompts"]
    r0 = shares[shares["run_id"] == "r0"].set_index(["phase", "kind"])["share"]
    # steps 0..5 in thirds: (0, 1), (2, 3), (4, 5)
    for phase, steps in (("early", (0, 1)), ("middle", (2, 3)), ("late", (4, 5))):
        for kind in ("hard", "easy"):
            assert r0[(phase, kind)] == pytest.approx(sum(SHARES[kind][s] for s in steps) / 2)
    histogram = chart_data(at)["Prompts by mean return (groups table)"]
    counts = histogram[histogram["run_id"] == "r0"].groupby(["phase", "spread"])["prompts"].sum()
    assert counts.to_dict() == {("early", "all returns equal"): 1, ("early", "returns differ"): 1,
                                ("middle", "all returns equal"): 1, ("middle", "returns differ"): 1,
                                ("late", "all returns equal"): 1, ("late", "returns differ"): 1}


def test_collapse_alarms_are_drawn_and_listed(grid_store, monkeypatch):
    at = open_app(grid_store.path, monkeypatch)
    alarms = chart_alarms(at)["Validation success"]
    assert alarms[["run_id", "step"]].values.tolist() == [["r1", 3]]
    assert "1 collapse alarm(s)" in [e.label for e in at.expander]


def test_spearman_table_and_scatter_over_runs(grid_store, monkeypatch):
    at = open_app(grid_store.path, monkeypatch)
    scatter = chart_data(at)["mi/first_turn/mi_est vs final val/success"]
    assert dict(zip(scatter["run_id"], zip(scatter["x"], scatter["y"]))) == {
        run: (MI_EST[run][-1], RUNS[run][3]) for run in RUNS}
    table = next(df.value for df in at.dataframe if "spearman" in df.value.columns)
    rho = dict(zip(table["diagnostic"], table["spearman"]))
    assert rho["mi/first_turn/mi_est"] == pytest.approx(1.0)
    assert rho["update/entropy"] == pytest.approx(-1.0)
    assert set(table["runs"]) == {4}
    at.radio(key="corr_how").set_value("mean over steps")
    rerun(at)
    at.slider(key="corr_window").set_value((1, 2))
    table = next(df.value for df in rerun(at).dataframe if "spearman" in df.value.columns)
    assert dict(zip(table["diagnostic"], table["spearman"]))["mi/first_turn/mi_est"] == \
        pytest.approx(-1.0)


def test_stochasticity_view_with_replicates(grid_store, monkeypatch):
    at = open_app(grid_store.path, monkeypatch)
    sweep = chart_data(at)["Final val/return vs slip (mean ± std over seeds)"]
    rows = {(slip, f): (m, s, n) for slip, f, m, s, n in zip(
        sweep["slip"], sweep["filtering"], sweep["mean"], sweep["spread"], sweep["replicates"])}
    assert rows.keys() == {(0.0, "no filter"), (0.5, "top_p 0.9")}
    mean, spread, n = rows[(0.0, "no filter")]
    assert (mean, n) == (pytest.approx(0.6), 2) and spread == pytest.approx(math.sqrt(0.02))
    mean, spread, n = rows[(0.5, "top_p 0.9")]
    assert (mean, n) == (pytest.approx(0.3), 2) and spread == pytest.approx(math.sqrt(0.02))


def test_pivot_takes_replicate_mean_and_spread(grid_store, monkeypatch):
    at = open_app(grid_store.path, monkeypatch)
    # slip and filter split these runs identically: one axis, named by the filter
    assert at.selectbox(key="pivot_a").options == ["filter.name"]
    assert at.selectbox(key="pivot_b").options == ["(none)"]
    pivot = chart_data(at)["Final val/success: replicate mean ± std"]
    cells = {a: (m, s, n) for a, m, s, n in
             zip(pivot["a"], pivot["mean"], pivot["spread"], pivot["replicates"])}
    assert cells["none"] == (pytest.approx(0.25), pytest.approx(math.sqrt(0.045)), 2)
    assert cells["top_p"] == (pytest.approx(0.55), pytest.approx(math.sqrt(0.125)), 2)
    table = next(df.value for df in at.dataframe if "top_p" in df.value.columns)
    assert table.loc["", "none"] == "0.250 ± 0.212 (n=2)"

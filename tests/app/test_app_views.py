"""The app (mirage/app/main.py) under Streamlit's AppTest on a store of three real tiny
runs: every chart's data comes from the selected runs, and empty or partial stores show
a message instead of an error."""

from __future__ import annotations

from datetime import datetime, timezone
import json
import shutil

import pytest
from app_testing import chart_data, infos, open_app, rerun

from mirage.core.store.heartbeat import this_process
from mirage.core.store.run_store import RunStore

pytestmark = pytest.mark.slow  # the session store trains three tiny policies


def final(store: RunStore, run_id: str, name: str) -> float:
    return store.metrics(run_id, name)[-1][2]


def dataframe_with(at, column: str):
    """The only dataframe on the page that has ``column``."""
    frames = [df.value for df in at.dataframe if column in df.value.columns]
    assert len(frames) == 1, [list(df.value.columns) for df in at.dataframe]
    return frames[0]


def test_selecting_runs_changes_the_data_behind_each_chart(app_store, monkeypatch):
    db, ids = app_store
    store = RunStore(db)
    at = open_app(db, monkeypatch)
    every = set(ids.values())
    with_mi = {ids["diag"], ids["diag2"]}  # "plain" ran without diagnostics
    assert set(at.multiselect(key="runs").value) == every  # the newest runs, selected

    charts = chart_data(at)
    success = charts["Validation success"]
    assert set(success["run_id"]) == every
    for run_id in every:  # the very values stored, at the very steps
        rows = success[(success["run_id"] == run_id) & (success["name"] == "val/success")]
        assert list(zip(rows["step"], rows["value"])) == [
            (step, value) for step, _, value in store.metrics(run_id, "val/success")]
    retrieval = charts["Retrieval accuracy vs chance"]
    assert set(retrieval["run_id"]) == with_mi
    assert set(retrieval["name"]) == {"mi/first_turn/retrieval_acc",
                                      "mi/first_turn/retrieval_chance"}
    assert set(charts["mi/first_turn/mi_est over steps"]["run_id"]) == with_mi
    assert set(charts["mi/first_turn/mi_est vs mi/first_turn/h_cond"]["run_id"]) == with_mi
    assert set(charts["Kept ratio"]["run_id"]) == every
    assert set(charts["Zero-variance groups"]["run_id"]) == every
    assert set(charts["Prompts by mean return (groups table)"]["run_id"]) == every
    slip = charts["Final val/return vs slip (mean ± std over seeds)"]
    assert sorted(zip(slip["slip"], slip["filtering"], slip["replicates"])) == [
        (0.0, "top_p 0.9", 1), (0.2, "no filter", 1), (0.2, "top_p 0.9", 1)]
    assert slip["mean"].tolist() == [  # ordered by filter setting, then slip
        final(store, ids[name], "val/return") for name in ("plain", "diag", "diag2")]
    assert charts["Final val/success: replicate mean ± std"]["replicates"].sum() == 3

    at.multiselect(key="runs").set_value([ids["diag"], ids["plain"]])
    charts = chart_data(rerun(at))
    two = {ids["diag"], ids["plain"]}
    assert set(charts["Validation success"]["run_id"]) == two
    assert set(charts["Retrieval accuracy vs chance"]["run_id"]) == {ids["diag"]}
    assert set(charts["Kept ratio"]["run_id"]) == two
    assert set(charts["Prompts by mean return (groups table)"]["run_id"]) == two
    slip = charts["Final val/return vs slip (mean ± std over seeds)"]
    assert sorted(zip(slip["slip"], slip["filtering"])) == [(0.0, "top_p 0.9"), (0.2, "no filter")]
    assert charts["Final val/success: replicate mean ± std"]["replicates"].sum() == 2

    at.multiselect(key="runs").set_value([ids["diag2"]])
    charts = chart_data(rerun(at))
    assert set(charts["Validation success"]["run_id"]) == {ids["diag2"]}
    assert set(charts["mi/first_turn/mi_est over steps"]["run_id"]) == {ids["diag2"]}
    assert "Final val/return vs slip (mean ± std over seeds)" not in charts  # one slip
    assert any("two or more slip" in text for text in infos(at))


def test_runs_are_narrowed_by_filter_and_seed(app_store, monkeypatch):
    db, ids = app_store
    at = open_app(db, monkeypatch)
    assert at.multiselect(key="facet_filter").options == ["none", "top_p"]
    at.multiselect(key="facet_filter").set_value(["top_p"])
    rerun(at)
    assert set(at.multiselect(key="runs").options) == {
        at.multiselect(key="runs").format_func(r) for r in (ids["diag"], ids["diag2"])}
    assert set(chart_data(at)["Kept ratio"]["run_id"]) == {ids["diag"], ids["diag2"]}
    at.multiselect(key="facet_seed").set_value(["2"])
    rerun(at)
    assert at.multiselect(key="runs").value == [ids["diag2"]]
    assert set(chart_data(at)["Kept ratio"]["run_id"]) == {ids["diag2"]}


def test_pivot_over_two_chosen_axes(app_store, monkeypatch):
    db, ids = app_store
    store = RunStore(db)
    at = open_app(db, monkeypatch)
    at.selectbox(key="pivot_a").set_value("env.options.slip")
    rerun(at)
    at.selectbox(key="pivot_b").set_value("filter.name")
    pivot = chart_data(rerun(at))["Final val/success: replicate mean ± std"]
    cells = {(a, b): (mean, n) for a, b, mean, n in
             zip(pivot["a"], pivot["b"], pivot["mean"], pivot["replicates"])}
    assert cells == {
        ("0", "top_p"): (final(store, ids["diag"], "val/success"), 1),
        ("0.2", "none"): (final(store, ids["plain"], "val/success"), 1),
        ("0.2", "top_p"): (final(store, ids["diag2"], "val/success"), 1),
    }
    table = dataframe_with(at, "0.2")  # the pivot table: rows filter.name, columns slip
    assert list(table.columns) == ["0", "0.2"] and set(table.index) == {"none", "top_p"}


def test_rollout_browser_shows_the_sampled_turns(app_store, monkeypatch):
    db, ids = app_store
    store = RunStore(db)
    at = open_app(db, monkeypatch)
    run_id = at.selectbox(key="rollout_run").value
    steps = sorted({row["step"] for row in store.rollouts(run_id)})
    assert at.select_slider(key="rollout_step_a").value == steps[0]
    assert at.select_slider(key="rollout_step_b").value == steps[-1]
    shown = [df.value for df in at.dataframe if "reasoning" in df.value.columns]
    for frame, step in zip(shown, (steps[0], steps[-1])):
        stored = [r for r in store.rollouts(run_id, step) if r["turn"] == 0]
        assert frame["reasoning"].tolist() == [r["reasoning"] for r in stored]
        assert frame["prompt"].tolist() == [r["prompt"] for r in stored]
        assert frame["action"].tolist() == [r["action"] for r in stored]
    other = next(r for r in ids.values() if r != run_id)
    at.selectbox(key="rollout_run").set_value(other)
    at.toggle(key="rollout_first").set_value(False)
    shown = [df.value for df in rerun(at).dataframe if "reasoning" in df.value.columns]
    assert shown[0]["reasoning"].tolist() == [r["reasoning"] for r in store.rollouts(other, 0)]


def test_config_diff_of_two_runs(app_store, monkeypatch):
    db, ids = app_store
    at = open_app(db, monkeypatch)
    at.selectbox(key="diff_left").set_value(ids["diag"])
    at.selectbox(key="diff_right").set_value(ids["plain"])
    table = dataframe_with(rerun(at), "path").set_index("path")
    assert list(table.columns) == [ids["diag"], ids["plain"]]
    assert table.loc["config.filter.name"].tolist() == ['"top_p"', '"none"']
    assert table.loc["config.env.options.slip"].tolist() == ["0", "0.2"]
    names = RunStore(db).get_run(ids["diag"])["config"]["diagnostics"]["names"]
    assert table.loc["config.diagnostics.names"].tolist() == [json.dumps(names), "[]"]
    assert "config.rollout.group_size" not in table.index  # equal values are not listed


def test_config_diff_shows_the_reproducibility_record(app_store, monkeypatch, tmp_path):
    db, ids = app_store
    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    store = RunStore(copy)
    record = store.get_run(ids["plain"])["environment"]
    assert record["packages"]["torch"]  # every run records it
    store.update_run(ids["plain"], environment={**record, "packages": {**record["packages"], "torch": "0.0"}})
    at = open_app(copy, monkeypatch)
    at.selectbox(key="diff_left").set_value(ids["diag"])
    at.selectbox(key="diff_right").set_value(ids["plain"])
    table = dataframe_with(rerun(at), "path").set_index("path")
    assert table.loc["environment.packages.torch"].tolist()[1] == '"0.0"'
    assert "environment.python" not in table.index  # equal values are not listed


def test_a_run_without_diagnostics_shows_why(app_store, monkeypatch):
    db, ids = app_store
    at = open_app(db, monkeypatch)
    at.multiselect(key="runs").set_value([ids["plain"]])
    charts = chart_data(rerun(at))
    assert set(charts["Validation success"]["run_id"]) == {ids["plain"]}
    assert "Retrieval accuracy vs chance" not in charts
    messages = " ".join(infos(at))
    assert "No `mi/first_turn/retrieval_acc` in the selected runs: the `mi` diagnostic" in messages
    assert "No `mi/first_turn/mi_est`" in messages
    assert "No `grad/*`" in messages and "No `reward/hard_share`" in messages
    assert "Select two or more runs to diff" in messages  # one run selected
    assert "needs at least 3 runs" in messages


def test_empty_store_and_missing_store(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere" / "runs.duckdb"
    at = open_app(missing, monkeypatch)
    assert "No run store at" in infos(at)[0] and not chart_data(at)
    assert not missing.exists()  # the app never creates the store
    RunStore(tmp_path / "empty.duckdb")
    at = open_app(tmp_path / "empty.duckdb", monkeypatch)
    assert "has no runs yet" in infos(at)[0] and not chart_data(at)


def test_a_running_run_is_re_read(app_store, tmp_path, monkeypatch):
    db, ids = app_store
    copy = tmp_path / "live.duckdb"
    shutil.copy(db, copy)
    store = RunStore(copy)
    run_id = ids["diag"]
    store.set_status(run_id, "running")
    # this process plays the run's: alive, so the run reads running, not crashed
    store.update_run(run_id, **this_process(), heartbeat_at=datetime.now(timezone.utc))
    at = open_app(copy, monkeypatch)
    assert any("in progress" in caption.value for caption in at.caption)
    runs = at.table[0].value.set_index("run")
    assert runs.loc[run_id, ["status", "progress"]].tolist() == ["running", "step 4/4"]
    store.record_step(run_id, 5, {"val/success": 0.75, "filter/kept_ratio": 0.5})
    charts = chart_data(rerun(at))
    success = charts["Validation success"]
    assert (5, 0.75) in set(zip(success[success["run_id"] == run_id]["step"],
                                success[success["run_id"] == run_id]["value"]))
    kept = charts["Kept ratio"]
    assert kept[kept["run_id"] == run_id]["step"].max() == 5

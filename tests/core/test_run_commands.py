"""The run commands (core runs/show/tag/untag/note/rename/delete/export/diff) on a store
built directly, and their bad input: one ``error:`` line, exit 2, the store unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pytest

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore

IDS = ("20260101-000000-aaaaaa", "20260101-000001-bbbbbb", "20260102-000000-cccccc")
SECOND, THIRD = "20260101-000001", "20260102"  # unique id prefixes


def config(**changes) -> dict:
    data = RunConfig().model_dump(mode="json")
    for path, value in changes.items():
        section, _, leaf = path.partition(".")
        data[section][leaf] = value
    return data


@pytest.fixture(params=["new", 3], ids=lambda v: f"schema-{v}")
def store(request, tmp_path, old_store) -> Path:
    """Three runs: top_p/0.9 finished (tagged baseline, named 'base'), top_p/0.5 failed,
    and a finished 'none' filter run of experiment 'collapse' with a checkpoint folder;
    in a new file, or in the previous release's fixture store (migrated, its run deleted)."""
    db = tmp_path / "store" / "runs.duckdb"
    if request.param != "new":
        db.parent.mkdir()
        old_store(request.param).rename(db)
    runs = RunStore(db)
    for run in runs.list_runs():
        runs.delete_run(run["run_id"])
    runs.create_run(IDS[0], config(**{"filter.rho": 0.9}), [], "c0", seed=0, name="base",
                    tags=["baseline"], environment={"python": "3.11.7", "packages": {"torch": "2.13"}})
    runs.create_run(IDS[1], config(**{"filter.rho": 0.5}), [], "c1", seed=0,
                    environment={"python": "3.11.7", "packages": {"torch": "2.14"}})
    runs.create_run(IDS[2], config(**{"filter.name": "none"}), [], "c2", seed=1, experiment="collapse")
    for index, run_id in enumerate(IDS):
        for step in (0, 1):
            runs.record_step(run_id, step, {"val/success": 0.25 * (index + step), "train/return": 1.0})
        runs.record_event(run_id, 1, "note", f"event of {run_id}")
    runs.set_status(IDS[0], "finished")
    runs.set_status(IDS[1], "failed", "boom")
    runs.set_status(IDS[2], "finished")
    checkpoint = db.parent / "checkpoints" / IDS[2] / "step-000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.bin").write_bytes(b"weights")
    return db


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def ok(cli, *args) -> str:
    code, out, err = cli(*args)
    assert code == 0, (out, err)
    return out


def refused(cli, db: Path, *args) -> str:
    before = digest(db.parent)
    code, out, err = cli(*args, "--db", db)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert digest(db.parent) == before, "refused input changed the store"
    return lines[0]


def test_runs_lists_a_table_and_filters_on_config_status_tag_and_experiment(cli, store):
    out = ok(cli, "runs", "--db", store).splitlines()
    assert out[0].split() == ["id", "name", "status", "env", "algo", "filter", "rho", "seed",
                              "last", "step", "created", "tags"]
    assert [line.split()[0] for line in out[1:]] == list(IDS)
    assert out[1].split()[1:3] == ["base", "finished"] and out[1].rstrip().endswith("baseline")
    ids = lambda *a: [r["run_id"] for r in json.loads(ok(cli, "runs", "--json", "--db", store, *a))]
    assert ids("--where", "filter.rho=0.5") == [IDS[1]]
    assert ids("--where", "filter.name=top_p", "--where", "seed=0") == [IDS[0], IDS[1]]
    assert ids("--where", "env.options.slip=0.2") == []
    assert ids("--status", "failed") == [IDS[1]]
    assert ids("--tag", "baseline") == [IDS[0]]
    assert ids("--experiment", "collapse") == [IDS[2]]
    listed = json.loads(ok(cli, "runs", "--json", "--db", store, "--tag", "baseline"))[0]
    assert listed["config"]["filter"]["rho"] == 0.9 and listed["status"] == "finished"


def test_show_prints_labels_record_config_last_metrics_and_events(cli, store):
    out = ok(cli, "show", "base", "--db", store)
    for text in (IDS[0], "name     base", "status   finished", "tags     baseline", "git      c0",
                 "python: 3.11.7", "torch: '2.13'", "rho: 0.9", "val/success: 0.25",
                 f"step 1 note: event of {IDS[0]}"):
        assert text in out, text
    assert "regime   not measured" in out  # no MI checks stored
    shown = json.loads(ok(cli, "show", SECOND, "--json", "--db", store))
    assert shown["run_id"] == IDS[1] and shown["error"] == "boom" and shown["regimes"] == []
    assert shown["last_metrics"] == {"train/return": 1.0, "val/success": 0.5}


def test_show_names_the_reasoning_regime_of_each_check(cli, store):
    runs = RunStore(store)
    for step, retrieval in ((0, 0.9), (1, 0.15)):
        runs.record_step(IDS[0], step, {"mi/first_turn/retrieval_acc": retrieval, "mi/first_turn/h_cond": 1.0,
                                        "mi/first_turn/retrieval_chance": 0.125,
                                        "mi/first_turn/format_valid": 1.0})
    out = ok(cli, "show", "base", "--db", store)
    assert "regime   diverse from step 0, template collapse from step 1" in out
    assert "template collapse = retrieval <= chance + 0.1" in out
    shown = json.loads(ok(cli, "show", "base", "--json", "--db", store))
    assert [c["regime"] for c in shown["regimes"]] == ["diverse", "template collapse"]


def test_tag_untag_note_and_rename_change_the_labels(cli, store):
    ok(cli, "tag", THIRD, "good", "seen", "--db", store)
    ok(cli, "untag", THIRD, "seen", "--db", store)
    ok(cli, "note", THIRD, "the collapse run", "--db", store)
    ok(cli, "rename", THIRD, "collapsed", "--db", store)
    row = RunStore(store).get_run(IDS[2])
    assert (row["tags"], row["note"], row["name"]) == (["good"], "the collapse run", "collapsed")
    assert "status   finished" in ok(cli, "show", "collapsed", "--db", store)
    ok(cli, "note", "collapsed", "", "--db", store)
    assert RunStore(store).get_run(IDS[2])["note"] is None


def test_delete_asks_unless_yes(cli, store):
    before = digest(store.parent)
    for answer in ("n\n", ""):  # "no", and no answer at all
        code, out, err = cli("delete", THIRD, "--db", store, input=answer, timeout=120)
        assert code == 2 and f"delete 1 run(s) {IDS[2]}" in out
        assert err.strip().splitlines()[-1] == "error: nothing deleted"
    assert digest(store.parent) == before
    code, out, err = cli("delete", THIRD, "--db", store, input="y\n", timeout=120)
    assert code == 0 and RunStore(store).get_run(IDS[2]) is None


def test_delete_removes_the_run_its_rows_and_checkpoints(cli, store):
    ok(cli, "delete", THIRD, "--yes", "--db", store)
    runs = RunStore(store)
    assert runs.get_run(IDS[2]) is None and runs.metrics(IDS[2]) == [] and runs.events(IDS[2]) == []
    assert not (store.parent / "checkpoints" / IDS[2]).exists()
    assert [r["run_id"] for r in runs.list_runs()] == list(IDS[:2])


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_export_writes_runs_and_long_metrics(cli, store, tmp_path, fmt):
    out = tmp_path / "out"
    ok(cli, "export", "base", SECOND, "--format", fmt, "--out", out, "--db", store)
    reader = {"parquet": "read_parquet", "csv": "read_csv", "jsonl": "read_json"}[fmt]
    con = duckdb.connect()
    runs = con.execute(f"SELECT run_id FROM {reader}('{out}/runs.{fmt}') ORDER BY run_id").fetchall()
    metrics = con.execute(f"SELECT run_id, step, name, value FROM {reader}('{out}/metrics.{fmt}')"
                          " ORDER BY run_id, step, name").fetchall()
    assert [r[0] for r in runs] == list(IDS[:2])
    assert metrics[:2] == [(IDS[0], 0, "train/return", 1.0), (IDS[0], 0, "val/success", 0.0)]
    assert len(metrics) == 8
    if fmt == "jsonl":
        first = json.loads((out / "runs.jsonl").read_text().splitlines()[0])
        assert first["config"]["filter"]["rho"] == 0.9  # nested, not a string


def test_diff_shows_config_environment_and_metric_differences(cli, store):
    out = ok(cli, "diff", "base", SECOND, "--db", store)
    assert f"--- {IDS[0]}\n+++ {IDS[1]}" in out
    assert "  filter.rho: 0.9 -> 0.5" in out
    assert '  packages.torch: "2.13" -> "2.14"' in out
    assert "  val/success: 0.25 -> 0.5" in out
    assert "train/return" not in out


@pytest.mark.parametrize("args, expected", [
    (["show", "ghost"], "unknown run: no run 'ghost'"),
    (["show", "2026"], f"run prefix '2026' is ambiguous: {IDS[0]} (base), {IDS[1]}, {IDS[2]}"),
    (["diff", "base", "20260101"], "run prefix '20260101' is ambiguous"),
    (["tag", "ghost", "x"], "unknown run"),
    (["untag", "base", "nope"], "has no tag 'nope'; its tags: baseline"),
    (["note", "20260101", "x"], "ambiguous"),
    (["rename", THIRD, "base"], f"name 'base' is taken by run {IDS[0]}"),
    (["rename", THIRD, IDS[1]], "is taken by run"),
    (["delete", "--yes", "base", "ghost"], "unknown run"),
    (["export", "base", "--format", "xlsx"], "unknown format 'xlsx'; valid: parquet, csv, jsonl"),
    (["runs", "--where", "filter.rhoo=0.5"], "--where filter.rhoo: unknown config path; valid under filter:"),
    (["runs", "--where", "filter.rho"], "--where expects PATH=VALUE"),
    (["runs", "--where", "steps=many"], "--where steps=many: Input should be a valid integer"),
    (["runs", "--status", "zombie"], "unknown status 'zombie'; valid: crashed, failed, finished"),
])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(cli, store, args, expected):
    assert expected in refused(cli, store, *args)


def test_a_missing_store_is_refused_without_creating_it(cli, tmp_path):
    code, out, err = cli("runs", "--db", tmp_path / "none.duckdb")
    assert code == 2 and err.strip() == f"error: no run store at {tmp_path / 'none.duckdb'}"
    assert not (tmp_path / "none.duckdb").exists()

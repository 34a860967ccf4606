"""A run's stored turns and their pictures through the commands that read them: ``core
show`` names each picture and writes them out, ``core export`` carries them in every
format, and ``core report --from-store`` keeps them in the study it exports and restores
(the store: tests/image_store.py, an image run with the environment's real pictures)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import duckdb
import pytest
from image_store import RUN_ID, turns, write_image_store

from mirage.core.cli.rollout_view import picture_label
from mirage.core.rl.image import Image
from mirage.core.store.export import export_runs
from mirage.core.store.run_store import RunStore
from mirage.report.results import export_study, restore_study


@pytest.fixture
def image_store(tmp_path) -> Path:
    db = tmp_path / "store" / "runs.duckdb"
    db.parent.mkdir()
    write_image_store(db)
    return db


def ok(cli, *args) -> str:
    code, out, err = cli(*args)
    assert code == 0, (out, err)
    return out


def folder_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_picture_is_labelled_with_its_size_and_bytes():
    picture = turns(0)[0][1]
    assert picture_label(picture.png) == f"[picture 64x64, PNG {len(picture.png) / 1000:.1f} kB]"


def test_show_names_each_turns_picture_and_writes_the_pictures_out(cli, image_store, tmp_path):
    out = ok(cli, "show", "lake-pictures", "--rollouts", "1", "--pictures", tmp_path / "pics",
             "--db", image_store)
    assert "rollouts 8 turns at 2 steps (0 to 1); 8 show a picture" in out
    assert "rollouts at step 1 (4 turns of 2 trajectories):" in out
    stored = turns(1)
    for row, picture in stored:
        assert (f"  prompt {row.prompt_index}, sample 0, turn {row.turn}: reward 0 "
                f"{picture_label(picture.png)}") in out
        assert f"    reasoning {row.reasoning}" in out
        written = tmp_path / "pics" / f"step-1_prompt-{row.prompt_index}_sample-0_turn-{row.turn}_picture-0.png"
        assert f"wrote {written}" in out and Image(written.read_bytes()) == picture
    assert len(list((tmp_path / "pics").iterdir())) == len(stored)  # only the step's
    ok(cli, "show", "lake-pictures", "--pictures", tmp_path / "all", "--db", image_store)
    assert len(list((tmp_path / "all").iterdir())) == len(turns(0)) + len(stored)


def test_show_json_gives_the_turns_with_their_pictures_as_base64(cli, image_store):
    record = json.loads(ok(cli, "show", RUN_ID, "--json", "--rollouts", "0", "--db", image_store))
    assert record["rollouts"] == {"turns": 8, "steps": [0, 1], "turns_with_pictures": 8}
    shown = record["rollout_turns"]
    assert [(t["prompt_index"], t["turn"], t["action"]) for t in shown] == [
        (row.prompt_index, row.turn, row.action) for row, _ in turns(0)]
    assert [base64.b64decode(t["images"][0]) for t in shown] == [p.png for _, p in turns(0)]
    assert "rollout_turns" not in json.loads(ok(cli, "show", RUN_ID, "--json", "--db", image_store))


def test_show_of_a_text_run_says_its_turns_are_text(cli, old_store, tmp_path):
    db = old_store(7)  # a tiny text run: 60 turns over steps 0-2
    (run,) = RunStore(db).list_runs()
    out = ok(cli, "show", run["run_id"], "--rollouts", "2", "--db", db)
    assert "rollouts 60 turns at 3 steps (0 to 2); text only" in out
    assert "rollouts at step 2 (20 turns of 4 trajectories):" in out and "[picture" not in out
    code, _, err = cli("show", run["run_id"], "--pictures", tmp_path / "pics", "--db", db)
    assert code == 2 and f"--pictures: run {run['run_id']} stored no pictures (its stored turns are text)" in err
    assert not (tmp_path / "pics").exists()


@pytest.mark.parametrize("args, expected", [
    (["--rollouts", "5"], "--rollouts: run 20261206-120000-1a2b3c stored no rollouts at step 5; "
                          "it stored them at steps 0, 1"),
    (["--rollouts", "-1"], "--rollouts: step -1 is negative"),
    (["--pictures", ""], "--pictures: empty path"),
    (["--pictures", "{file}"], "is a file, not a folder"),
])
def test_show_refuses_a_step_without_rollouts_and_a_folder_it_cannot_write(cli, image_store, args, expected):
    (image_store.parent / "a-file").write_text("not a folder")
    args = [str(image_store.parent / "a-file") if a == "{file}" else a for a in args]
    before = folder_digest(image_store.parent)
    code, out, err = cli("show", RUN_ID, *args, "--db", image_store)
    assert code == 2 and err.strip().splitlines() == [f"error: {err.strip()[7:]}"], err
    assert expected in err
    assert folder_digest(image_store.parent) == before


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_export_carries_each_turns_pictures(cli, image_store, tmp_path, fmt):
    out = tmp_path / "out"
    printed = ok(cli, "export", RUN_ID, "--format", fmt, "--out", out, "--db", image_store)
    assert f"wrote {out / f'rollouts.{fmt}'}" in printed
    expected = [(row.prompt_index, row.turn, [p.png]) for step in (0, 1) for row, p in turns(step)]
    if fmt == "parquet":
        rows = duckdb.connect().execute(
            f"SELECT prompt_index, turn, images FROM read_parquet('{out}/rollouts.parquet')").fetchall()
        assert rows == expected
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
        assert [(r["prompt_index"], r["turn"], [base64.b64decode(i) for i in r["images"]])
                for r in rows] == expected
        assert rows[0]["prompt"].startswith("<image>") and rows[0]["step"] == 0
    else:
        rows = duckdb.connect().execute(
            f"SELECT prompt_index, turn, images FROM read_csv('{out}/rollouts.csv')").fetchall()
        assert [(p, t, [base64.b64decode(i) for i in images.split(" ")]) for p, t, images in rows] == expected


def test_export_of_a_text_run_writes_its_turns_without_pictures(old_store, tmp_path):
    db = old_store(7)
    (run,) = RunStore(db).list_runs()
    export_runs(db, [run["run_id"]], tmp_path, "jsonl")
    rows = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 60 and all(r["images"] == [] for r in rows)


def test_the_exported_study_keeps_the_pictures(tmp_path):
    """``core report --from-store`` exports the study's runs (Parquet) and ``--restore``
    brings them back into a store: the turns' pictures are the very bytes stored."""
    db = tmp_path / "runs.duckdb"
    source = write_image_store(db)
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE runs SET experiment = 'pictures'")
    assert export_study(db, tmp_path / "study", ["pictures"]) == {"pictures": 1}
    restored = RunStore(restore_study(tmp_path / "study", tmp_path / "restored.duckdb"))
    assert restored.rollouts(RUN_ID) == source.rollouts(RUN_ID)
    assert restored.rollouts(RUN_ID, 1)[0]["images"] == [turns(1)[0][1].png]

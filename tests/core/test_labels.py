"""Run labels (name, tags, note) are checked in one place (mirage/core/store/labels.py), for
``core run --name/--tag/--note`` and ``core rename``, ``tag`` and ``note`` alike: a bad
one is one line, exit 2, and the store stays as it was."""

from __future__ import annotations

import pytest

from mirage.core.errors import ConfigError
from mirage.core.store.labels import LIMITS, check_label
from mirage.core.store.run_store import RunStore

BAD = [
    ("", "cannot be empty"),
    ("   ", "cannot be only whitespace"),
    ("a\x00b", "cannot hold control characters"),
    ("a\x1b[31mb", "cannot hold control characters"),
    ("a\u200bb", "cannot hold control characters"),  # a zero-width space (format character)
]


@pytest.mark.parametrize("kind", ["name", "tag", "note"])
@pytest.mark.parametrize("value, rule", BAD + [(None, "at most")])
def test_each_kind_refuses_the_same_bad_values(kind, value, rule):
    value = "x" * (LIMITS[kind] + 1) if value is None else value
    with pytest.raises(ConfigError, match=rule):
        check_label(kind, value)


def test_good_labels_pass_and_a_note_may_have_lines():
    assert check_label("name", "baseline run 3") == "baseline run 3"
    assert check_label("tag", "top-p") == "top-p"
    assert check_label("note", "first line\n\tindented second") == "first line\n\tindented second"
    with pytest.raises(ConfigError, match="control characters"):
        check_label("tag", "two\nlines")


@pytest.fixture
def one_run(tmp_path):
    db = tmp_path / "runs.duckdb"
    RunStore(db).create_run("r1", {}, [], None, name="old", tags=["keep"], note="kept")
    return db


def bytes_of(db):
    return db.read_bytes()


@pytest.mark.parametrize("command", [
    ["tag", "r1", ""], ["tag", "r1", "ok", "  "], ["tag", "r1", "a\x07b"],
    ["rename", "r1", ""], ["rename", "r1", "\t"], ["rename", "r1", "x" * 101],
    ["note", "r1", " "], ["note", "r1", "bell\x07"],
])
def test_workbench_commands_refuse_bad_labels_and_leave_the_store(cli, one_run, command):
    before = bytes_of(one_run)
    code, out, err = cli(*command, "--db", one_run)
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: a run ")
    assert bytes_of(one_run) == before
    row = RunStore(one_run).get_run("r1")
    assert (row["name"], row["tags"], row["note"]) == ("old", ["keep"], "kept")


@pytest.mark.parametrize("flag, value", [("--name", ""), ("--tag", " "), ("--note", "a\x07b")])
def test_run_refuses_bad_labels_before_any_work(cli, tiny_config_file, tmp_path, flag, value):
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--quiet", flag, value)
    assert code == 2 and err.startswith(f"error: {flag}: a run ") and len(err.strip().splitlines()) == 1
    assert not db.exists()


def test_an_empty_note_still_clears_one(cli, one_run):
    code, out, err = cli("note", "r1", "", "--db", one_run)
    assert code == 0, err
    assert RunStore(one_run).get_run("r1")["note"] is None

"""Every command that reads a store checks the file first, as the writer does: a file that
is not a DuckDB store, a directory, a missing or unreadable file, or a store of a newer
schema is one line naming the path and the problem, exit 2, and no traceback."""

from __future__ import annotations

import os

import duckdb
import pytest

from mirage.core.store.file import SCHEMA_VERSION
from mirage.core.store.run_store import RunStore

READERS = [["runs"], ["show", "r1"], ["tag", "r1", "t"], ["note", "r1", "n"], ["rename", "r1", "n"],
           ["diff", "r1", "r1"], ["export", "r1", "--out", "OUT"], ["delete", "r1", "--yes"],
           ["untag", "r1", "t"], ["sweeps"]]


def bad_stores(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 10)
    newer = tmp_path / "newer.duckdb"
    RunStore(newer).create_run("r1", {}, [], None)
    with duckdb.connect(str(newer)) as con:
        con.execute("UPDATE schema_version SET version = ?", [SCHEMA_VERSION + 1])
    return {
        "text": (text, "is not a DuckDB database file"),
        "directory": (tmp_path, "is a directory"),
        "missing": (tmp_path / "nothing.duckdb", ""),
        "newer": (newer, f"was written by a newer MIRAGE (store schema {SCHEMA_VERSION + 1}; "
                         f"this code reads up to {SCHEMA_VERSION})"),
    }


@pytest.mark.parametrize("command", READERS, ids=lambda c: c[0])
def test_a_reading_command_refuses_a_bad_store_in_one_line(cli, tmp_path, command):
    for label, (path, said) in bad_stores(tmp_path).items():
        before = path.read_bytes() if path.is_file() else None
        args = [str(tmp_path / "out") if a == "OUT" else a for a in command]
        code, out, err = cli(*args, "--db", path)
        assert code == 2, (label, out, err)
        assert "Traceback" not in out + err and len(err.strip().splitlines()) == 1, (label, err)
        assert str(path) in err and said in err, (label, err)
        if before is not None:
            assert path.read_bytes() == before, label


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_store_is_refused(cli, tmp_path):
    db = tmp_path / "runs.duckdb"
    RunStore(db).create_run("r1", {}, [], None)
    db.chmod(0)
    code, _, err = cli("runs", "--db", db)
    assert code == 2 and "cannot be read" in err


def test_report_and_app_check_the_store_too(cli, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database")
    code, _, err = cli("report", "--from-store", text, "--results", tmp_path / "r")
    assert code == 2 and f"--from-store {str(text)!r} is not a DuckDB database file" in err
    code, _, err = cli("app", "--db", text, "--port", "8999")
    assert code == 2 and f"--db {str(text)!r} is not a DuckDB database file" in err

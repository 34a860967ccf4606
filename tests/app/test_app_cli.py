"""``core app``: its argument checks and the Streamlit command it hands over to."""

from __future__ import annotations

import sys
from pathlib import Path

from mirage.app.launch import ENTRY_SCRIPT, streamlit_argv


def test_streamlit_command_runs_the_entry_script_on_the_store(tmp_path):
    argv = streamlit_argv(tmp_path / "s.duckdb", port=8600, headless=True)
    assert argv[:5] == [sys.executable, "-m", "streamlit", "run", str(ENTRY_SCRIPT)]
    assert ENTRY_SCRIPT.is_file()
    options = dict(zip(argv[5:-3:2], argv[6:-3:2]))
    assert options == {"--server.address": "127.0.0.1", "--server.headless": "true", "--browser.gatherUsageStats": "false",
                       "--server.fileWatcherType": "none", "--server.port": "8600"}
    assert argv[-3:] == ["--", "--db", str((tmp_path / "s.duckdb").resolve())]
    assert "--server.port" not in streamlit_argv(Path("x.duckdb"))  # Streamlit's default


def test_app_refuses_a_directory_or_a_bad_port(tmp_path, cli):
    code, _, err = cli("app", "--db", tmp_path)
    assert code == 2 and f"--db {str(tmp_path)!r} is a directory" in err
    code, _, err = cli("app", "--db", tmp_path / "s.duckdb", "--port", "70000")
    assert code == 2 and "--port 70000 is not a port number (1-65535)" in err
    assert not (tmp_path / "s.duckdb").exists()


def test_app_listens_on_the_host_it_is_given(tmp_path):
    argv = streamlit_argv(tmp_path / "s.duckdb", host="0.0.0.0")
    assert argv[argv.index("--server.address") + 1] == "0.0.0.0"


def test_app_refuses_an_empty_or_bad_host_before_anything(tmp_path, cli):
    for host, said in (("", "--host: empty"), ("999.1.2.3", "--host '999.1.2.3' is not an IP address"),
                       ("not a host!", "--host 'not a host!' is not an IP address")):
        code, _, err = cli("app", "--db", tmp_path / "s.duckdb", "--host", host)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s.duckdb").exists()

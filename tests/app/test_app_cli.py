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
    assert options == {"--server.headless": "true", "--browser.gatherUsageStats": "false",
                       "--server.fileWatcherType": "none", "--server.port": "8600"}
    assert argv[-3:] == ["--", "--db", str((tmp_path / "s.duckdb").resolve())]
    assert "--server.port" not in streamlit_argv(Path("x.duckdb"))  # Streamlit's default


def test_app_refuses_a_directory_or_a_bad_port(tmp_path, cli):
    code, _, err = cli("app", "--db", tmp_path)
    assert code == 2 and f"--db {str(tmp_path)!r} is a directory" in err
    code, _, err = cli("app", "--db", tmp_path / "s.duckdb", "--port", "70000")
    assert code == 2 and "--port 70000 is not a port number (1-65535)" in err
    assert not (tmp_path / "s.duckdb").exists()

"""How ``core app`` starts Streamlit on the entry script."""

from __future__ import annotations

import sys
from pathlib import Path

ENTRY_SCRIPT = Path(__file__).resolve().parent / "main.py"


def streamlit_argv(db: Path, *, port: int | None = None, headless: bool = False) -> list[str]:
    """``python -m streamlit run main.py [options] -- --db DB``. Headless: no browser is
    opened and Streamlit asks nothing on the terminal. Usage statistics stay off and
    source files are not watched (the app's code does not change while it runs)."""
    argv = [sys.executable, "-m", "streamlit", "run", str(ENTRY_SCRIPT),
            "--server.headless", str(headless).lower(),
            "--browser.gatherUsageStats", "false",
            "--server.fileWatcherType", "none"]
    if port is not None:
        argv += ["--server.port", str(port)]
    return argv + ["--", "--db", str(Path(db).resolve())]

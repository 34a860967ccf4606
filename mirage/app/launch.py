"""How ``core app`` starts Streamlit on the entry script."""

from __future__ import annotations

import sys
from pathlib import Path

ENTRY_SCRIPT = Path(__file__).resolve().parent / "main.py"


DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501  # Streamlit's


def streamlit_argv(db: Path, *, port: int | None = None, headless: bool = False,
                   host: str = DEFAULT_HOST) -> list[str]:
    """``python -m streamlit run main.py [options] -- --db DB``. It listens on ``host``
    only (this machine's loopback unless asked otherwise). Headless: no browser is opened
    and Streamlit asks nothing on the terminal. Usage statistics stay off and source files
    are not watched (the app's code does not change while it runs)."""
    argv = [sys.executable, "-m", "streamlit", "run", str(ENTRY_SCRIPT),
            "--server.address", host,
            "--server.headless", str(headless).lower(),
            "--browser.gatherUsageStats", "false",
            "--server.fileWatcherType", "none"]
    if port is not None:
        argv += ["--server.port", str(port)]
    return argv + ["--", "--db", str(Path(db).resolve())]

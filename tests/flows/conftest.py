"""Fixtures for the flow tests: a real Prefect server on a free port, and cleanup that
kills every process a test started (and their children) even when the test fails."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from shared_runs import api_get


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kill_tree(process: subprocess.Popen | psutil.Process, grace: float = 10.0) -> None:
    """Terminate a process and all its descendants; SIGKILL what outlives ``grace``."""
    try:
        root = psutil.Process(process.pid)
        family = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        family = []
    for member in family:
        try:
            member.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=grace)
    for member in alive:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    if isinstance(process, subprocess.Popen):
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            pass
    left = [m for m in family if m.is_running() and m.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {left}"


@dataclass
class PrefectServer:
    api_url: str
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment pointed at the server."""
        return {**os.environ, "PREFECT_API_URL": self.api_url, "PREFECT_HOME": str(self.home),
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_RUNNER_POLL_FREQUENCY": "1",
                "RAY_AUTH_MODE": "disabled", **extra}

    def settings(self):
        """Prefect's settings for in-process flows (the env is read when prefect is
        imported). Logs stay local: sending them outlives the server at session end."""
        from prefect.settings import (
            PREFECT_API_URL, PREFECT_HOME, PREFECT_LOGGING_TO_API_ENABLED, temporary_settings,
        )

        return temporary_settings({PREFECT_API_URL: self.api_url, PREFECT_HOME: str(self.home),
                                   PREFECT_LOGGING_TO_API_ENABLED: False})


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory):
    """``prefect server start`` on a free port for the whole session; killed at the end."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    # Logs streamed out, as `core serve` sets for its own server: `--watch` prints them.
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "true",
           "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED": "true"}
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    api_url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 120
        while api_get(f"{api_url}/health")[0] != 200:
            assert process.poll() is None, (home / "server.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "prefect server not ready after 120 s"
            time.sleep(0.5)
        yield PrefectServer(api_url, home)
    finally:
        kill_tree(process)
        log.close()

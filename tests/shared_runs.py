"""Busy runs that tests in different modules assert different things about, started once
per test process and watched while they run: a two-process ``core run`` (the metrics it
stores: tests/core/test_parallel_run.py; the sockets its ranks listen on:
tests/core/test_listening_sockets.py) and a ``core serve`` with its own Prefect server
(the sockets: test_listening_sockets; that SIGTERM stops its server:
tests/flows/test_serve.py). Every such test is in the ``busy`` xdist group, so one worker
runs them all and the first to ask starts the run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
_DONE: dict[str, object] = {}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(root: int) -> set[str]:
    """The addresses the process ``root`` and its descendants listen on (TCP and UDP)."""
    try:
        family = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return set()
    found = set()
    for member in family:
        try:
            for conn in member.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN or (conn.type == socket.SOCK_DGRAM and not conn.raddr):
                    found.add(conn.laddr.ip)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def watch(process: subprocess.Popen, seconds: float, until=None) -> set[str]:
    """Every address the tree listened on, sampled every 0.2 s for ``seconds`` or until
    the process ends (or ``until()`` holds)."""
    seen: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        seen |= listening(process.pid)
        if until is not None and until():
            seen |= listening(process.pid)
            break
        time.sleep(0.2)
    return seen


def stop(process: subprocess.Popen) -> None:
    family = []
    try:
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        pass
    for member in family:
        try:
            member.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=15)
    for member in alive:
        member.kill()
    process.wait(10)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def api_get(url: str) -> tuple[int, dict | None]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, None
    except OSError:
        return 0, None


def command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # exited, or a zombie nobody reaped yet
        return ""


def two_process_run(cli_argv, config, db: Path, *extra: str, seconds: float) -> tuple[int, set[str], str]:
    """``core run --parallel ddp --nproc 2 EXTRA``: its exit code, every address its tree
    listened on while it ran, and its stderr."""
    process = subprocess.Popen(
        cli_argv("run", "--config", config, "--db", db, "--quiet", "--parallel", "ddp", "--nproc", "2", *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        seen = watch(process, seconds)
        code = process.wait(60)
    finally:
        stop(process)
    return code, seen, process.stderr.read()


@dataclass
class WatchedRun:
    db: Path
    code: int
    seen: set[str]  # the addresses its process tree listened on
    err: str


def two_torchrun_processes(tmp_path_factory: pytest.TempPathFactory, cli_argv, config: Path) -> WatchedRun:
    """``core run --config CONFIG --parallel ddp --nproc 2 --steps 3`` (the tiny config),
    run once per test process."""
    if "torchrun" not in _DONE:
        db = tmp_path_factory.mktemp("two-torchrun") / "two.duckdb"
        code, seen, err = two_process_run(cli_argv, config, db, "--steps", "3", seconds=400)
        _DONE["torchrun"] = WatchedRun(db, code, seen, err)
    return _DONE["torchrun"]


@dataclass
class ServedOwnServer:
    port: int
    seen: set[str]  # the addresses its process tree listened on until its deployments were served
    servers: list[str]  # the command lines of the Prefect server processes it started
    registered: bool  # whether sweep/stochasticity was served before the deadline
    exit_code: int | None  # after SIGTERM
    outlived: list[str]  # the server processes still running 15 s after it exited
    health_after: int  # /api/health's status after it stopped (0: nothing answers)
    log: str


def core_serve_own_server(tmp_path_factory: pytest.TempPathFactory, cli_argv) -> ServedOwnServer:
    """``core serve --port PORT`` without ``PREFECT_API_URL`` (it starts its own Prefect
    server), watched from its start until its deployments are served (and 5 s more), then
    sent SIGTERM alone; run once per test process."""
    if "serve" in _DONE:
        return _DONE["serve"]
    import signal

    folder = tmp_path_factory.mktemp("serve-own-server")
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(folder / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    api_url = f"http://127.0.0.1:{port}/api"
    log_path = folder / "serve.log"
    log = open(log_path, "w")
    serve = subprocess.Popen(cli_argv("serve", "--db", folder / "main.duckdb", "--port", port), env=env, cwd=REPO,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        seen = watch(serve, 150, until=lambda: answers(f"{api_url}/health"))
        registered = lambda: api_get(f"{api_url}/deployments/name/sweep/stochasticity")[0] == 200  # noqa: E731
        seen |= watch(serve, 120, until=registered)
        seen |= watch(serve, 5)  # the deployments being served meanwhile
        ok = registered()
        family = psutil.Process(serve.pid).children(recursive=True) if serve.poll() is None else []
        server = [p for p in family if "server" in command_line(p)]
        servers = [command_line(p) for p in server]
        code = None
        outlived = []
        if ok and server:
            serve.send_signal(signal.SIGTERM)  # core serve alone: it must stop its server
            code = serve.wait(30)
            _, alive = psutil.wait_procs(server, timeout=15)
            outlived = [command_line(p) for p in alive]
        health_after = api_get(f"{api_url}/health")[0]
    finally:
        stop(serve)  # what is left of its tree (nothing, when it stopped as asked)
        log.close()
    result = ServedOwnServer(port, seen, servers, ok, code, outlived, health_after, log_path.read_text())
    _DONE["serve"] = result
    return result


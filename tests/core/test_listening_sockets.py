"""Nothing listens beyond this machine unless asked (issue #45): every listening socket of
``core app``, ``core run --nproc 2``, ``core run --launcher ray`` and ``core serve``, at
their defaults, is on loopback; ``core app --host 0.0.0.0`` says what it exposes. The
sockets are read from each command's process tree while it runs (psutil); no traffic
leaves the machine (only 127.0.0.1 is ever connected to)."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("busy")]  # busy processes: one such test at a time


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


def beyond_loopback(addresses: set[str]) -> set[str]:
    return {a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_loopback}


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


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_core_app_listens_on_loopback_unless_told_otherwise(cli_argv, tmp_path, host):
    port = free_port()
    args = ["app", "--db", str(tmp_path / "s.duckdb"), "--port", str(port), "--headless"]
    if host != "127.0.0.1":
        args += ["--host", host]
    process = subprocess.Popen(cli_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        seen = watch(process, 90, until=lambda: answers(f"http://127.0.0.1:{port}/_stcore/health"))
    finally:
        stop(process)
    first = process.stderr.read().splitlines()[0]
    assert seen, "the app never listened"
    if host == "127.0.0.1":
        assert beyond_loopback(seen) == set(), seen
        assert first.startswith("core app: serving") and "this machine only" in first
    else:
        assert "0.0.0.0" in seen or "::" in seen  # what was asked for, and only then
        assert first.startswith("warning: core app --host 0.0.0.0 serves every run")
        assert "no authentication" in first


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


def test_a_two_process_run_listens_on_loopback_only(cli_argv, tiny_config_file, tmp_path):
    code, seen, err = two_process_run(cli_argv, tiny_config_file, tmp_path / "runs.duckdb", "--steps", "2",
                                      seconds=400)
    assert code == 0, err[-2000:]
    assert seen, "the ranks' process group listened nowhere: the sampling missed it"
    assert beyond_loopback(seen) == set(), seen


def test_a_ray_launch_at_its_defaults_starts_nothing_that_listens(cli_argv, tiny_config_file, tmp_path):
    code, seen, err = two_process_run(cli_argv, tiny_config_file, tmp_path / "runs.duckdb", "--launcher", "ray",
                                      seconds=120)
    assert code == 2 and seen == set()
    assert "--ray-address local" in err
    assert not (tmp_path / "runs.duckdb").exists()


def test_core_serve_listens_on_loopback_only(cli_argv, tmp_path):
    port = free_port()
    home = tmp_path / "prefect"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    process = subprocess.Popen(cli_argv("serve", "--db", tmp_path / "runs.duckdb", "--port", str(port)),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
    try:
        seen = watch(process, 150, until=lambda: answers(f"http://127.0.0.1:{port}/api/health"))
        seen |= watch(process, 5)  # the deployments being served meanwhile
    finally:
        stop(process)
    assert f"127.0.0.1:{port}" in " ".join(f"{a}:{port}" for a in seen) or "127.0.0.1" in seen
    assert beyond_loopback(seen) == set(), seen

"""``core serve``: one deployment of the ``sweep`` flow per registry.yaml experiment.

Uses the Prefect server at ``PREFECT_API_URL``, or starts a local one (``prefect server
start``) for as long as it serves and stops it on exit. Served flow runs execute in
subprocesses of this process; ``prefect deployment run sweep/NAME`` starts one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from mirage.core.run.experiments import load_registry

SERVER_READY_TIMEOUT = 90.0
PREFECT_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_RUNNER_POLL_FREQUENCY": "1",
    "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "true",
    "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED": "true",
}


def prefect_command() -> list[str]:
    return [sys.executable, "-m", "prefect"]


def prefect_environment() -> dict[str, str]:
    """This process's environment with the settings every MIRAGE Prefect process needs:
    analytics off (otherwise a 'database is locked' traceback), a 1 s runner poll so a
    triggered run starts at once, and a server that streams flow-run logs out, so
    `prefect deployment run --watch` prints the sweep's progress lines and its final
    state's message (without them it prints only the state's name); each only where
    the user has not set it."""
    env = dict(os.environ)
    for name, value in PREFECT_DEFAULTS.items():
        env.setdefault(name, value)
    return env


def server_healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def start_server(host: str, port: int) -> tuple[subprocess.Popen, str]:
    """``prefect server start`` in its own process group (its output in a log file named
    on failure); wait until /api/health answers."""
    api_url = f"http://{host}:{port}/api"
    log = tempfile.NamedTemporaryFile("w", prefix="prefect-server-", suffix=".log", delete=False)
    with log:
        process = subprocess.Popen(
            [*prefect_command(), "server", "start", "--host", host, "--port", str(port)],
            env=prefect_environment(), start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + SERVER_READY_TIMEOUT
    while not server_healthy(api_url):
        if process.poll() is not None:
            tail = Path(log.name).read_text().strip().splitlines()[-3:]
            raise RuntimeError(f"prefect server on port {port} exited ({log.name}): {' / '.join(tail)}")
        if time.monotonic() > deadline:
            stop_process_group(process)
            raise RuntimeError(f"prefect server on {api_url} not ready after {SERVER_READY_TIMEOUT:g}s")
        time.sleep(0.5)
    return process, api_url


def stop_process_group(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after ``grace`` seconds."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def serve_registry(registry: Path | None, defaults: dict[str, Any], host: str, port: int) -> None:
    """Serve one ``sweep`` deployment per experiment (named after it) until interrupted.
    ``defaults``: parameters every deployment gets (db, registry, width, runner, ...)."""
    experiments = load_registry(registry)  # a malformed registry fails before serving
    os.environ.update(prefect_environment())  # before prefect is imported
    for sig in (signal.SIGTERM, signal.SIGHUP):  # stop the server we start, however we end
        signal.signal(sig, _exit_on_signal)
    server = None
    if not os.environ.get("PREFECT_API_URL"):
        server, os.environ["PREFECT_API_URL"] = start_server(host, port)
        print(f"started a Prefect server: {os.environ['PREFECT_API_URL']} (UI: http://{host}:{port})")
    try:
        from prefect import serve
        from prefect.deployments.runner import EntrypointType

        from mirage.flows.sweep import sweep

        deployments = [
            sweep.to_deployment(
                name=name, parameters={**defaults, "experiment": name},
                description=experiment.description, entrypoint_type=EntrypointType.MODULE_PATH,
            )
            for name, experiment in experiments.items()
        ]
        print(f"in another terminal:\n  export PREFECT_API_URL={os.environ['PREFECT_API_URL']}\n"
              f"  prefect deployment run sweep/{next(iter(experiments))} --watch")
        serve(*deployments)
    finally:
        if server is not None:
            stop_process_group(server)


def _exit_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)

"""Nothing listens beyond this machine unless asked (issue #45): every listening socket of
``core app``, ``core run --nproc 2``, ``core run --launcher ray`` and ``core serve``, at
their defaults, is on loopback; ``core app --host 0.0.0.0`` says what it exposes. The
sockets are read from each command's process tree while it runs (psutil); no traffic
leaves the machine (only 127.0.0.1 is ever connected to)."""

from __future__ import annotations

import ipaddress
import subprocess

import pytest
from shared_runs import answers, core_serve_own_server, free_port, stop, two_process_run, two_torchrun_processes, watch

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("busy")]  # busy processes: one such test at a time


def beyond_loopback(addresses: set[str]) -> set[str]:
    return {a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_loopback}


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


def test_a_two_process_run_listens_on_loopback_only(tmp_path_factory, cli_argv, tiny_config_file):
    # the run tests/core/test_parallel_run.py checks the metrics of (tests/shared_runs.py)
    run = two_torchrun_processes(tmp_path_factory, cli_argv, tiny_config_file)
    assert run.code == 0, run.err[-2000:]
    assert run.seen, "the ranks' process group listened nowhere: the sampling missed it"
    assert beyond_loopback(run.seen) == set(), run.seen


def test_a_ray_launch_at_its_defaults_starts_nothing_that_listens(cli_argv, tiny_config_file, tmp_path):
    code, seen, err = two_process_run(cli_argv, tiny_config_file, tmp_path / "runs.duckdb", "--launcher", "ray",
                                      seconds=120)
    assert code == 2 and seen == set()
    assert "--ray-address local" in err
    assert not (tmp_path / "runs.duckdb").exists()


def test_core_serve_listens_on_loopback_only(tmp_path_factory, cli_argv):
    # the serve tests/flows/test_serve.py stops (tests/shared_runs.py)
    served = core_serve_own_server(tmp_path_factory, cli_argv)
    seen, port = served.seen, served.port
    assert f"127.0.0.1:{port}" in " ".join(f"{a}:{port}" for a in seen) or "127.0.0.1" in seen
    assert beyond_loopback(seen) == set(), seen

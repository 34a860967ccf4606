"""The sandbox against hostile snippets: each is contained, scored 0 and reported, and
this test process survives. Small limits keep every case within a few seconds."""

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mirage.envs.deepcoder import DeepCoder, DeepCoderOptions
from mirage.envs.sandbox import SandboxLimits, namespaces_available, run_python

REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=3, memory_mb=128, output_bytes=65536, processes=8)
needs_namespaces = pytest.mark.skipif(
    not namespaces_available(),
    reason="unshare/chroot unavailable (not root?): network and file isolation cannot be shown; "
           "see docs/environments.md#the-sandbox",
)


def scored(code: str):
    """Score ``code`` as a DeepCoder answer under the small limits."""
    env = DeepCoder(DeepCoderOptions(cpu_seconds=1, wall_seconds=3, memory_mb=128, output_bytes=65536))
    env.reset(0)
    out = env.step(code)
    return out.reward, env.last_run, env.render()


def test_a_plain_program_runs():
    result = run_python("print(6 * 7)", LIMITS)
    assert (result.status, result.stdout) == ("ok", "42\n")


def test_infinite_loop_hits_the_cpu_limit():
    reward, run, text = scored("while True:\n    pass")
    assert reward == 0.0 and run.status in ("cpu_limit", "timeout")
    assert f"Sandbox : {run.status}" in text


def test_sleeping_forever_hits_the_wall_clock():
    reward, run, _ = scored("import time\ntime.sleep(60)")
    assert reward == 0.0 and run.status == "timeout"


def test_memory_bomb_is_refused():
    reward, run, text = scored("x = bytearray(10 ** 10)")
    assert reward == 0.0 and run.status in ("error", "killed") and "MemoryError" in run.stderr + text


def test_fork_bomb_is_contained_and_leaves_no_process():
    reward, run, _ = scored("import os\nwhile True:\n    os.fork()")
    assert reward == 0.0 and run.status != "ok"
    if namespaces_available():  # the PID namespace dies with its first process
        for _ in range(20):
            survivors = subprocess.run(["ps", "-u", "65534", "-o", "pid=,cmd="],
                                       capture_output=True, text=True).stdout.strip()
            if not survivors:
                break
            time.sleep(0.1)
        assert survivors == ""


@needs_namespaces
def test_writing_outside_the_working_directory_fails(tmp_path):
    target = tmp_path / "escaped.txt"
    outside = REPO / "SANDBOX_ESCAPE.txt"
    code = (f"open({str(target)!r}, 'w').write('x')\n"
            f"open({str(outside)!r}, 'w').write('x')\n")
    reward, run, _ = scored(code)
    assert reward == 0.0 and run.status == "error"
    assert not target.exists() and not outside.exists()
    inside = run_python("open('notes.txt', 'w').write('ok'); print(open('notes.txt').read())", LIMITS)
    assert inside.stdout == "ok\n"  # the fresh working directory is writable


@needs_namespaces
def test_network_socket_cannot_reach_the_host():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(3)
    port = server.getsockname()[1]
    accepted = []
    thread = threading.Thread(target=lambda: _accept(server, accepted))
    thread.start()
    code = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\ns.sendall(b'hi')"
    reward, run, _ = scored(code)
    thread.join()
    server.close()
    assert reward == 0.0 and run.status == "error" and not accepted
    assert "unreachable" in run.stderr or "refused" in run.stderr


def _accept(server, accepted):
    try:
        accepted.append(server.accept())
    except OSError:
        pass


@needs_namespaces
def test_project_files_are_invisible():
    code = f"print(open({str(REPO / 'pyproject.toml')!r}).read())"
    reward, run, _ = scored(code)
    assert reward == 0.0 and run.status == "error" and "FileNotFoundError" in run.stderr
    hidden = [str(REPO), os.environ["MIRAGE_CACHE"], "/etc/passwd", "/tmp", "/proc/1"]
    listing = run_python(f"import os\nprint([os.path.exists(p) for p in {hidden!r}], os.getuid())", LIMITS)
    assert listing.stdout == f"{[False] * len(hidden)} 65534\n"


def test_printing_megabytes_is_cut_off():
    reward, run, _ = scored("import sys\nwhile True:\n    sys.stdout.write('x' * 100000)")
    assert reward == 0.0 and run.status in ("output_limit", "cpu_limit")
    assert len(run.stdout) <= LIMITS.output_bytes
    stderr_flood = run_python("import sys\nsys.stderr.write('y' * 5_000_000)", LIMITS)
    assert stderr_flood.status == "output_limit" and len(stderr_flood.stderr) <= LIMITS.output_bytes


def test_environment_variables_do_not_leak(monkeypatch):
    monkeypatch.setenv("MIRAGE_SECRET_FOR_TEST", "s3cret")
    result = run_python("import os\nprint(sorted(os.environ))", LIMITS)
    assert "MIRAGE_SECRET_FOR_TEST" not in result.stdout and os.environ["MIRAGE_SECRET_FOR_TEST"]

"""The hostile-snippet suite for the code sandbox, run by whoever starts this file.

``python tests/envs/hostile.py PROJECT_DIR [CASE,CASE...]`` runs every case through
``mirage.envs.sandbox.run_python`` as the calling user and prints one JSON object per
case: the sandbox status, what escaped (judged from outside the sandbox: files on the
host, connections accepted, processes killed, secrets printed) and how many processes or
files it left behind. ``tests/envs/test_sandbox.py`` runs it as root and as an
unprivileged user. Standard library only, so any user's system Python can run it. With
a list of case names it runs just those WITHOUT isolation (set
``MIRAGE_SANDBOX_PRETEND_NO_ISOLATION=1``): the test that this suite detects escapes.

Every snippet first names its process (``prctl(PR_SET_NAME)``) with a token; a process
with that name after the run is a leftover. Start it with ``MIRAGE_HOSTILE_SECRET`` in
the environment: the /proc/PID/environ case looks for it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project being tested

from mirage.envs.sandbox import SandboxLimits, run_python  # noqa: E402

# A generous wall clock, so the limit under test fires first even on a loaded machine.
LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=60, memory_mb=128, output_bytes=65536,
                       processes=8, disk_mb=16)
WALL = SandboxLimits(cpu_seconds=1, wall_seconds=2, memory_mb=128, output_bytes=65536,
                     processes=8, disk_mb=16)
ESCAPED = "@@ESCAPED@@"


@dataclass
class Context:
    """What the host side prepared: paths, listeners, canaries, secrets."""

    token: str
    project: Path
    host_ip: str
    tcp_port: int = 0
    tcp_external_port: int = 0
    udp_port: int = 0
    canaries: list[subprocess.Popen] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)

    @property
    def secret(self) -> str:
        return os.environ.get("MIRAGE_HOSTILE_SECRET", "")

    def outside_paths(self) -> list[Path]:
        name = f"{self.token}-written"
        return [Path("/tmp", name), Path.home() / name, Path("/var/tmp", name), self.project / name]


@dataclass(frozen=True)
class Case:
    name: str
    code: str  # formatted with the Context's fields
    status: str  # the status that must come back
    escaped: Callable[[Context, object], list[str]] = lambda ctx, result: []
    limits: SandboxLimits = LIMITS
    stderr_has: str = ""


def _printed_escape(ctx: Context, result) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith(ESCAPED)]


def _written(ctx: Context, result) -> list[str]:
    return [str(path) for path in ctx.outside_paths() if path.exists()]


def _contains(needle_of: Callable[[Context], str]):
    def check(ctx: Context, result) -> list[str]:
        needle = needle_of(ctx)
        return [f"printed {needle!r}"] if needle and needle in result.stdout + result.stderr else []
    return check


def _accepted(ctx: Context, result) -> list[str]:
    time.sleep(0.2)  # a datagram or connection in flight
    return list(ctx.accepted)


def _canaries_dead(ctx: Context, result) -> list[str]:
    return [f"canary {c.pid} killed" for c in ctx.canaries if c.poll() is not None]


def _attempt(body: str) -> str:
    """``body`` then a line saying it worked (an exception means it was refused)."""
    indented = "\n".join("    " + line for line in body.splitlines())
    return f"try:\n{indented}\n    print({ESCAPED!r}, {body.splitlines()[-1]!r})\nexcept Exception as e:\n    print('refused', type(e).__name__)\n"


def _attempts(*bodies: str) -> str:
    return "".join(_attempt(body) for body in bodies)


CASES = [
    Case("fork bomb", "import os\nwhile True:\n    os.fork()", "error", stderr_has="BlockingIOError"),
    Case("memory bomb", "x = bytearray(10 ** 10)", "error", stderr_has="MemoryError"),
    Case("stdout flood", "import sys\nwhile True:\n    sys.stdout.write('x' * 100000)", "output_limit"),
    Case("stderr flood", "import sys\nsys.stderr.write('y' * 5_000_000)", "output_limit"),
    Case("write /tmp", _attempt("open('/tmp/{token}-written', 'w').write('x')"), "ok", _written),
    Case("write home", "import os\n" + _attempt("open(os.path.expanduser('~/{token}-written'), 'w').write('x')")
         + _attempt("open({home!r} + '/{token}-written', 'w').write('x')"), "ok", _written),
    Case("write /var/tmp", _attempt("open('/var/tmp/{token}-written', 'w').write('x')"), "ok", _written),
    Case("write project", _attempt("open({project!r} + '/{token}-written', 'w').write('x')"), "ok", _written),
    Case("read /etc/passwd", _attempt("print(open('/etc/passwd').read())"), "ok",
         lambda ctx, r: _printed_escape(ctx, r) + _contains(lambda c: "root:")(ctx, r)),
    Case("read project", _attempt("print(open({project!r} + '/pyproject.toml').read())"), "ok",
         lambda ctx, r: _printed_escape(ctx, r) + _contains(lambda c: "[project]")(ctx, r)),
    Case("list /tmp", "import os\n" + _attempt("print(os.listdir('/tmp'))"), "ok",
         lambda ctx, r: _printed_escape(ctx, r) + _contains(lambda c: f"{c.token}-marker")(ctx, r)),
    Case("parent environ", _attempt("print(open('/proc/{parent}/environ', 'rb').read())"), "ok",
         lambda ctx, r: _printed_escape(ctx, r) + _contains(lambda c: c.secret)(ctx, r)),
    Case("PID 1 environ", _attempt("print(open('/proc/1/environ', 'rb').read())"), "ok", _printed_escape),
    Case("tcp to 127.0.0.1", "import socket\n" + _attempt(
        "socket.create_connection(('127.0.0.1', {tcp_port}), timeout=2).sendall(b'hi')"), "ok",
         lambda ctx, r: _printed_escape(ctx, r) + _accepted(ctx, r)),
    Case("tcp to external", "import socket\n" + _attempts(
        "socket.create_connection(({host_ip!r}, {tcp_external_port}), timeout=2).sendall(b'hi')",
        "socket.create_connection(('1.1.1.1', 53), timeout=2)"), "ok",
         lambda ctx, r: _printed_escape(ctx, r) + _accepted(ctx, r)),
    Case("udp send", "import socket\n" + _attempts(
        "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hi', ('127.0.0.1', {udp_port}))",
        "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hi', ({host_ip!r}, {udp_port}))"),
         "ok", lambda ctx, r: _printed_escape(ctx, r) + _accepted(ctx, r)),
    Case("kill the parent", "import os\n" + _attempt("os.kill({parent}, 9)"),
         "ok", lambda ctx, r: []),  # if it escaped, this process is dead and reports nothing
    Case("kill a canary", "import os\n" + _attempts(*[f"os.kill({{canary{i}}}, 9)" for i in range(2)]),
         "ok", lambda ctx, r: _canaries_dead(ctx, r)),
    Case("setuid", "import os, subprocess\n" + _attempts(
        "os.setuid(0)", "os.setgid(0)",
        "assert subprocess.run(['/usr/bin/su', '-c', 'id -u'], capture_output=True, text=True, "
        "timeout=5).stdout.strip() == '0'"), "ok", _printed_escape),
    Case("ctypes syscalls", "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n" + _attempts(
        "assert libc.unshare(0x10000000) == 0",  # CLONE_NEWUSER
        "assert libc.unshare(0x40000000) == 0",  # CLONE_NEWNET
        "assert libc.mount(b'none', b'/work', b'tmpfs', 0, None) == 0",
        "assert libc.syscall(105, 0) == 0",  # setuid(0) on x86-64
        "assert libc.sethostname(b'escaped', 7) == 0",
        "assert libc.chroot(b'/work') == 0"), "ok", _printed_escape),
    Case("detached daemon", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
         "        time.sleep(30)\n        open('/tmp/{token}-written', 'w').write('x')\n    os._exit(0)\n"
         "time.sleep(0.5)\nprint('parent done')", "ok", _written),
    Case("daemon at the deadline", "import os, time\ntime.sleep(1.7)\nfor _ in range(3):\n"
         "    if os.fork() == 0:\n        os.setsid()\n        time.sleep(30)\n        os._exit(0)\n"
         "time.sleep(30)", "timeout", limits=WALL),
    Case("fill the disk", "import os\ntotal = 0\ntry:\n    for i in range(100000):\n"
         "        with open(f'f{{i}}', 'wb') as f:\n            f.write(b'x' * 60000)\n        total += 60000\n"
         "except OSError as e:\n    print('stopped', type(e).__name__)\nprint('MiB', total / 2 ** 20)", "ok",
         lambda ctx, r: [line for line in r.stdout.splitlines()
                         if line.startswith("MiB") and float(line.split()[1]) > LIMITS.disk_mb]),
    Case("sleep past the wall clock", "import time\ntime.sleep(600)", "timeout", limits=WALL),
    Case("block on stdin", "import sys\nprint(repr(sys.stdin.read()))\ninput()", "error", stderr_has="EOFError"),
    Case("infinite loop", "while True:\n    pass", "cpu_limit"),
]


def prepare(project: Path) -> Context:
    ctx = Context(token=f"mh{uuid.uuid4().hex[:10]}", project=project, host_ip=_host_ip())
    Path("/tmp", f"{ctx.token}-marker").write_text("x")
    for kind, port_field in ((socket.SOCK_STREAM, "tcp_port"), (socket.SOCK_STREAM, "tcp_external_port"),
                             (socket.SOCK_DGRAM, "udp_port")):
        server = socket.socket(socket.AF_INET, kind)
        server.bind(("127.0.0.1" if port_field == "tcp_port" else "0.0.0.0", 0))
        if kind == socket.SOCK_STREAM:
            server.listen(4)
        setattr(ctx, port_field, server.getsockname()[1])
        threading.Thread(target=_listen, args=(server, kind, ctx.accepted), daemon=True).start()
    sleeper = ["sleep", "600"]
    ctx.canaries.append(subprocess.Popen(sleeper))
    if os.geteuid() == 0:  # also one of the uid the sandbox runs as on the host
        ctx.canaries.append(subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + sleeper))
    else:
        ctx.canaries.append(subprocess.Popen(sleeper))
    return ctx


def run_case(case: Case, ctx: Context, unsafe: bool = False) -> dict:
    code = case.code.format(token=ctx.token, project=str(ctx.project), home=str(Path.home()),
                            parent=os.getpid(), tcp_port=ctx.tcp_port, udp_port=ctx.udp_port,
                            tcp_external_port=ctx.tcp_external_port, host_ip=ctx.host_ip,
                            canary0=ctx.canaries[0].pid, canary1=ctx.canaries[1].pid)
    named = f"import ctypes as _c\n_c.CDLL(None).prctl(15, {ctx.token.encode()!r}, 0, 0, 0)\n{code}"
    ctx.accepted.clear()
    started = time.monotonic()
    result = run_python(named, case.limits, unsafe_no_isolation=unsafe)
    seconds = time.monotonic() - started
    escaped = case.escaped(ctx, result)
    leftover_processes = _processes_named(ctx.token, kill=True)
    leftover_files = _written(ctx, result)
    for path in map(Path, leftover_files):
        path.unlink()
    status_ok = result.status == case.status and case.stderr_has in result.stderr
    return {"case": case.name, "status": result.status, "expected": case.status, "status_ok": status_ok,
            "isolation": result.isolation, "seconds": round(seconds, 2), "escaped": escaped,
            "leftover_processes": leftover_processes, "leftover_files": leftover_files,
            "contained": status_ok and not escaped and not leftover_processes and not leftover_files,
            "stdout_tail": result.stdout[-200:], "stderr_tail": result.stderr[-300:]}


def _processes_named(token: str, kill: bool) -> int:
    """Processes whose name is ``token``, after a short grace for the kernel's teardown
    (then killed, with ``kill``, so a leak does not outlive this suite)."""
    deadline = time.monotonic() + 1.0
    while True:
        found = []
        for comm in Path("/proc").glob("[0-9]*/comm"):
            try:
                if comm.read_text().strip() == token[:15]:
                    found.append(int(comm.parent.name))
            except OSError:
                pass
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in found if kill else []:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(found)


def _listen(server: socket.socket, kind: int, accepted: list[str]) -> None:
    while True:
        try:
            if kind == socket.SOCK_STREAM:
                connection, peer = server.accept()
                accepted.append(f"tcp connection from {peer[0]} to port {server.getsockname()[1]}")
                connection.close()
            else:
                _, peer = server.recvfrom(64)
                accepted.append(f"udp datagram from {peer[0]} to port {server.getsockname()[1]}")
        except OSError:
            return


def _host_ip() -> str:
    """This machine's address on its default route (no packet is sent), else loopback."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))
        return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    finally:
        probe.close()


def main(project: Path, unsafe_cases: list[str]) -> int:
    """Run every case, or with ``unsafe_cases`` only those, without isolation (to show
    that this suite sees an escape when there is one)."""
    ctx = prepare(project)
    try:
        for case in CASES:
            if not unsafe_cases or case.name in unsafe_cases:
                print(json.dumps(run_case(case, ctx, unsafe=bool(unsafe_cases))), flush=True)
    finally:
        for canary in ctx.canaries:
            if canary.poll() is None:
                canary.send_signal(signal.SIGKILL)
            canary.wait()
        Path("/tmp", f"{ctx.token}-marker").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), [name for name in sys.argv[2:3] for name in name.split(",")]))

"""Run untrusted Python (an agent's code) in an isolated, limited process; fail closed.

Layers, outermost first (docs/environments.md#the-sandbox says what each one stops):

1. Linux user, mount, network, PID, IPC and UTS namespaces (``mirage/envs/namespaces.py``):
   a new root holding only read-only ``/usr`` and Python, a size-capped tmpfs ``/work``
   as the only writable place, no network, no ``/proc``; the code runs as uid 65534 of
   its own user namespace without capabilities and with ``no_new_privs``.
2. Resource limits (``prlimit``): CPU seconds, address space, file size (which also caps
   what the code prints: stdout and stderr are files), processes, open files.
3. A wall-clock timeout here, after which the namespace's first process is killed (the
   kernel then kills and reaps every process in it).
4. An empty environment: nothing of the caller's variables reaches the code.

When the namespaces cannot be created the sandbox refuses to run code
(``IsolationUnavailable``, whose message says what is missing and how to enable it),
unless the caller passes ``unsafe_no_isolation=True``: then the code runs with layers
2-4 only, in a temporary directory, and ``SandboxResult.isolation`` is ``"none"``.
"""

from __future__ import annotations

import functools
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mirage.envs import namespaces

# Set to 1 to make the probe report that no isolating mechanism exists (to check the
# fail-closed path on a machine that has one).
PRETEND_NO_ISOLATION = "MIRAGE_SANDBOX_PRETEND_NO_ISOLATION"
ENABLE_HINT = (
    "enable unprivileged user namespaces (sysctl user.max_user_namespaces=15000; on Debian "
    "kernels kernel.unprivileged_userns_clone=1; on Ubuntu "
    "kernel.apparmor_restrict_unprivileged_userns=0), or pass --env-opt "
    "unsafe_no_isolation=true to run model-written code WITHOUT isolation"
)
# After the wall clock (or the code) ends, how long the namespace may take to die.
REAP_SECONDS = 10.0


class IsolationUnavailable(RuntimeError):
    """No isolating mechanism works here; the message is one line naming what is missing."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one sandboxed run (hashable: DeepCoder caches results per limits)."""

    cpu_seconds: int = 2
    wall_seconds: float = 5.0
    memory_mb: int = 256  # address space of each process
    output_bytes: int = 65536  # most bytes each of stdout/stderr (and any file) may grow to
    processes: int = 8  # processes of the code (fork bombs)
    disk_mb: int = 16  # size of the writable /work tmpfs

    def __post_init__(self):
        for name, least in (("cpu_seconds", 1), ("memory_mb", 32), ("output_bytes", 1024),
                            ("processes", 1), ("disk_mb", 1)):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < least:
                raise ValueError(f"SandboxLimits.{name} must be an integer >= {least} "
                                 f"(got {getattr(self, name)!r})")
        if not self.wall_seconds > 0:
            raise ValueError(f"SandboxLimits.wall_seconds must be > 0 (got {self.wall_seconds!r})")


@dataclass(frozen=True)
class SandboxResult:
    """What happened: ``status`` is ``ok``, ``error`` (non-zero exit), ``timeout``,
    ``cpu_limit``, ``output_limit`` or ``killed`` (another signal, e.g. memory);
    ``isolation`` is ``"namespaces"`` or ``"none"`` (the explicit unsafe mode)."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    isolation: str

    @property
    def report(self) -> str:
        """One line for an observation or a log: the status and the last stderr line."""
        last = next((line for line in reversed(self.stderr.strip().splitlines()) if line.strip()), "")
        return f"{self.status}: {last}" if last else self.status


@dataclass(frozen=True)
class Isolation:
    """What the probe found: the working mechanism, or the problem in one line."""

    mechanism: str | None
    problem: str = ""

    @property
    def available(self) -> bool:
        return self.mechanism is not None


def probe_isolation() -> Isolation:
    """Whether the namespaced sandbox runs here (a real run of a tiny program, once per
    process); ``MIRAGE_SANDBOX_PRETEND_NO_ISOLATION=1`` makes it report that none does."""
    if os.environ.get(PRETEND_NO_ISOLATION, "") not in ("", "0"):
        return Isolation(None, f"no isolation: {PRETEND_NO_ISOLATION} is set; " + ENABLE_HINT)
    return _probe_machine()


@functools.cache
def _probe_machine() -> Isolation:
    if missing := namespaces.missing_tools():
        return Isolation(None, f"no isolation: {', '.join(missing)} not found in /usr/bin "
                               f"(install util-linux); {ENABLE_HINT}")
    if problem := namespaces.unusable_python(_python_home()):
        return Isolation(None, f"no isolation: {problem}; {ENABLE_HINT}")
    result = _run_namespaced("print('isolated', __import__('os').getuid())", SandboxLimits(wall_seconds=30))
    if result.stdout != f"isolated {namespaces.SANDBOX_UID}\n":
        why = result.report if result.status != "ok" else f"unexpected output {result.stdout!r}"
        return Isolation(None, f"no isolation: unshare --user could not build the sandbox ({why}); "
                               f"{ENABLE_HINT}")
    return Isolation("namespaces")


def run_python(program: str, limits: SandboxLimits | None = None, *,
               unsafe_no_isolation: bool = False) -> SandboxResult:
    """Run ``program`` (Python source, fed on stdin) under ``limits``. Raises
    ``IsolationUnavailable`` when it cannot be isolated and ``unsafe_no_isolation`` is off."""
    limits = limits or SandboxLimits()
    isolation = probe_isolation()
    if isolation.available:
        return _run_namespaced(program, limits)
    if not unsafe_no_isolation:
        raise IsolationUnavailable(isolation.problem)
    with tempfile.TemporaryDirectory(prefix="mirage-unsafe-") as work:
        argv = [_python(), "-I", "-S", "-"]
        return _execute(argv, program, limits, "none", Path(work), functools.partial(_set_limits, limits))


def _run_namespaced(program: str, limits: SandboxLimits) -> SandboxResult:
    argv = namespaces.namespaced_argv(_python(), _python_home(), _prlimit_flags(limits), limits.disk_mb)
    return _execute(argv, program, limits, "namespaces", Path("/"), None)


def _execute(argv: list[str], program: str, limits: SandboxLimits, isolation: str, cwd: Path,
             preexec) -> SandboxResult:
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:
        stdin.write(program.encode())
        stdin.seek(0)
        process = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, cwd=cwd,
                                   env=_clean_env(), start_new_session=True, preexec_fn=preexec)
        finished = _wait(process.pid, limits.wall_seconds)
        if not finished and isolation == "namespaces":
            _kill_namespace(process.pid)
        _kill_group(process)
        returncode = process.returncode if finished else None
        stdout, out_full = _read_capped(out, limits.output_bytes)
        stderr, err_full = _read_capped(err, limits.output_bytes)
    return SandboxResult(_status(returncode, out_full or err_full), returncode, stdout, stderr, isolation)


def _status(returncode: int | None, output_full: bool) -> str:
    signals = {-returncode if returncode < 0 else returncode - 128} if returncode else set()
    if returncode is None:
        return "timeout"
    if returncode == 0:
        return "ok"
    if output_full or signal.SIGXFSZ in signals:
        return "output_limit"
    if signal.SIGXCPU in signals:
        return "cpu_limit"
    if returncode < 0 or returncode > 128:
        return "killed"
    return "error"


def _wait(pid: int, seconds: float) -> bool:
    """Whether ``pid`` exited within ``seconds`` (without reaping it, so its process group
    stays valid for the kill that follows)."""
    fd = os.pidfd_open(pid)
    try:
        return bool(select.select([fd], [], [], seconds)[0])
    finally:
        os.close(fd)


def _kill_namespace(unshare_pid: int) -> None:
    """SIGKILL ``unshare`` and the namespace's first process (its child): the kernel then
    kills and reaps every process in the namespace before that first process is gone."""
    try:
        children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    except OSError:
        children = []
    handles = []
    for child in children:
        try:
            handles.append(os.pidfd_open(int(child)))
        except OSError:  # already gone
            pass
    try:
        os.killpg(unshare_pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        for handle in handles:
            select.select([handle], [], [], REAP_SECONDS)
    finally:
        for handle in handles:
            os.close(handle)


def _kill_group(process: subprocess.Popen) -> None:
    try:  # the leader is not reaped yet, so the group id cannot have been reused
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _prlimit_flags(limits: SandboxLimits) -> str:
    memory = limits.memory_mb * 1024 * 1024
    # soft < hard: SIGXCPU (reported as cpu_limit) comes a second before SIGKILL
    return (f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1} --as={memory} "
            f"--fsize={limits.output_bytes} --nproc={limits.processes} --nofile=64 --core=0")


def _set_limits(limits: SandboxLimits) -> None:  # the unsafe mode: runs in the child before exec
    memory = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes, limits.output_bytes))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _python() -> str:
    """The base interpreter (not a venv wrapper inside the project)."""
    return str(Path(getattr(sys, "_base_executable", sys.executable)).resolve())


def _python_home() -> Path:
    return Path(sys.base_prefix).resolve()


def _clean_env() -> dict[str, str]:
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1"}


def _read_capped(handle, limit: int) -> tuple[str, bool]:
    """The file's first ``limit`` bytes as text, and whether it reached the limit."""
    handle.seek(0)
    data = handle.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) >= limit

"""Run untrusted Python (an agent's code) in a separate, limited process.

Layers, outermost first (docs/environments.md#the-sandbox says what each one stops):

1. Linux namespaces (``unshare``, needs root or CAP_SYS_ADMIN): a new network namespace
   (no interface but a downed loopback, so no connection leaves it), a new PID
   namespace (killing its first process kills every process the code started), a new
   mount, IPC and UTS namespace.
2. A fresh root file system (``chroot`` into a private tmpfs): only ``/usr`` and the
   Python installation are bind-mounted, read-only, plus ``/dev/null``; the working
   directory ``/work`` is an empty tmpfs. The project, the home directory, ``/tmp`` and
   ``/etc`` do not exist in there.
3. An unprivileged user (uid/gid 65534 "nobody", no supplementary groups, no
   capabilities, ``no_new_privs``) so setuid binaries and root-only calls are refused.
4. Resource limits (``setrlimit`` via ``prlimit``): CPU seconds, address space, file
   size (which also caps what the code prints: stdout and stderr are files), number of
   processes for that user (fork bombs), open files.
5. A wall-clock timeout in this process: the whole process group is killed.

Where namespaces are unavailable (not root, or a container without CAP_SYS_ADMIN) the
code still runs with layers 4 and 5, ``python -I -S`` in a fresh temporary directory
and an empty environment, and ``SandboxResult.isolation`` says ``"rlimits"`` instead of
``"namespaces"``: that mode does NOT hide the project's files nor block the network.
"""

from __future__ import annotations

import functools
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

NOBODY = 65534


class SandboxLimits(BaseModel):
    """Limits for one sandboxed run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_seconds: int = Field(2, ge=1)
    wall_seconds: float = Field(5.0, gt=0)
    memory_mb: int = Field(256, ge=32, description="address space of the Python process")
    output_bytes: int = Field(65536, ge=1024, description="most bytes each of stdout/stderr may grow to")
    processes: int = Field(8, ge=1, description="processes for the sandbox user (fork bombs)")


@dataclass(frozen=True)
class SandboxResult:
    """What happened: ``status`` is ``ok``, ``error`` (non-zero exit), ``timeout``,
    ``cpu_limit``, ``output_limit`` or ``killed`` (another signal, e.g. memory)."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    isolation: str  # "namespaces" or "rlimits"

    @property
    def report(self) -> str:
        """One line for an observation or a log: the status and the last stderr line."""
        last = next((line for line in reversed(self.stderr.strip().splitlines()) if line.strip()), "")
        return f"{self.status}: {last}" if last else self.status


@functools.cache
def namespaces_available() -> bool:
    """Whether ``unshare`` can create the namespaces and mounts the sandbox uses."""
    if not shutil.which("unshare") or not shutil.which("chroot") or not shutil.which("setpriv"):
        return False
    try:
        done = subprocess.run(
            ["unshare", "--mount", "--net", "--pid", "--fork", "--ipc", "--uts",
             "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
            capture_output=True, timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def run_python(program: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run ``program`` (Python source, fed on stdin) under ``limits``."""
    limits = limits or SandboxLimits()
    host_dir = Path(tempfile.mkdtemp(prefix="mirage-sandbox-"))
    try:
        (host_dir / "program.py").write_text(program)
        if namespaces_available():
            argv, isolation, preexec = _namespaced_argv(host_dir, limits), "namespaces", None
            cwd = host_dir
        else:
            work = host_dir / "work"
            work.mkdir()
            argv = [_python(), "-I", "-S", "-"]
            isolation, preexec, cwd = "rlimits", functools.partial(_set_limits, limits), work
        return _execute(argv, host_dir, cwd, limits, isolation, preexec)
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


def _execute(argv, host_dir: Path, cwd: Path, limits: SandboxLimits, isolation: str,
             preexec) -> SandboxResult:
    out_path, err_path = host_dir / "stdout", host_dir / "stderr"
    with open(host_dir / "program.py", "rb") as stdin, open(out_path, "wb") as out, \
            open(err_path, "wb") as err:
        process = subprocess.Popen(
            argv, stdin=stdin, stdout=out, stderr=err, cwd=cwd, env=_clean_env(),
            start_new_session=True, preexec_fn=preexec,
        )
        try:
            returncode: int | None = process.wait(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(process)
    stdout, out_full = _read_capped(out_path, limits.output_bytes)
    stderr, err_full = _read_capped(err_path, limits.output_bytes)
    if returncode is None:
        status = "timeout"
    elif returncode == 0:
        status = "ok"
    elif out_full or err_full or returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        status = "output_limit"
    elif returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGKILL):
        status = "cpu_limit" if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU) else "killed"
    elif returncode < 0 or returncode > 128:
        status = "killed"
    else:
        status = "error"
    return SandboxResult(status, returncode, stdout, stderr, isolation)


def _namespaced_argv(host_dir: Path, limits: SandboxLimits) -> list[str]:
    """``unshare`` running a root-in-namespace script that builds the new root and then
    drops to the sandbox user with limits."""
    root = host_dir / "root"
    root.mkdir()
    python_home = Path(sys.base_prefix).resolve()
    python = _python()
    binds = ["/usr"]
    if not str(python_home).startswith("/usr/"):
        binds.append(str(python_home))
    lines = ["set -e", "mount --make-rprivate /", f"R={shlex.quote(str(root))}",
             'mount -t tmpfs -o size=16m,mode=755 tmpfs "$R"']
    for source in binds:
        quoted = shlex.quote(source)
        lines += [f'mkdir -p "$R"{quoted}', f'mount --rbind {quoted} "$R"{quoted}',
                  f'mount -o remount,bind,ro "$R"{quoted}']
    for link in ("bin", "lib", "lib64", "sbin"):  # merged-/usr layouts keep these as links
        if Path("/" + link).is_symlink():
            lines.append(f'ln -s {shlex.quote(os.readlink("/" + link))} "$R"/{link}')
        elif Path("/" + link).is_dir():
            lines += [f'mkdir -p "$R"/{link}', f'mount --rbind /{link} "$R"/{link}',
                      f'mount -o remount,bind,ro "$R"/{link}']
    lines += [
        'mkdir -p "$R"/dev "$R"/work',
        'touch "$R"/dev/null && mount --bind /dev/null "$R"/dev/null',
        'mount -t tmpfs -o size=16m,mode=1777 tmpfs "$R"/work',
        'cd "$R"/work',
        f"exec {shutil.which('chroot')} \"$R\" /usr/bin/setpriv "
        f"--reuid={NOBODY} --regid={NOBODY} --clear-groups --no-new-privs "
        "--inh-caps=-all --bounding-set=-all "
        f"/usr/bin/prlimit {_prlimit_flags(limits)} "
        # python is not PID 1 of the namespace (PID 1 ignores default-action signals)
        f"-- /bin/sh -c 'cd /work && HOME=/work {shlex.quote(python)} -I -S -; exit $?'",
    ]
    return ["unshare", "--mount", "--net", "--pid", "--fork", "--ipc", "--uts", "--kill-child",
            "sh", "-c", "\n".join(lines)]


def _prlimit_flags(limits: SandboxLimits) -> str:
    memory = limits.memory_mb * 1024 * 1024
    # soft < hard: SIGXCPU (reported as cpu_limit) comes a second before SIGKILL
    return (f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1} --as={memory} --fsize={limits.output_bytes} "
            f"--nproc={limits.processes} --nofile=64 --core=0")


def _set_limits(limits: SandboxLimits) -> None:  # runs in the child before exec
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


def _clean_env() -> dict[str, str]:
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1"}


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _read_capped(path: Path, limit: int) -> tuple[str, bool]:
    """The file's first ``limit`` bytes as text, and whether it reached the limit."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) >= limit

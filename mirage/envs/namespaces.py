"""The command line that isolates one sandboxed run with Linux namespaces (``unshare``).

Two nested user namespaces, so the same command works for root and for any user allowed
to create user namespaces (docs/environments.md#the-sandbox says which machines are):

1. ``unshare --user --map-root-user --mount --net --pid --ipc --uts --fork --kill-child``
   (plain ``unshare --mount ...`` when already root): a shell that is root only inside
   that namespace builds the new root: a read-only tmpfs over ``/tmp`` holding read-only
   bind mounts of ``/usr`` and the Python installation, ``/dev/null`` and a writable
   tmpfs ``/work`` capped at ``disk_mb``. No ``/proc``, ``/etc``, home or project.
2. ``unshare --user --map-user=65534 --root=NEWROOT --wd=/work``: the code runs as uid
   65534 of a second user namespace, without capabilities, with ``no_new_privs`` and
   rlimits (``prlimit``). Root first switches to the host uid 65534: the kernel never
   applies the process limit to host uid 0. The process limit counts per user namespace,
   so other sandboxes and the user's own processes do not share it.

The network namespace has only a downed loopback (no capability to raise it), and the
PID namespace dies with its first process: nothing the code starts outlives the run.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

SANDBOX_UID = 65534
NEW_ROOT = "/tmp"  # mount point of the new root inside the private mount namespace
NAMESPACE_FLAGS = ["--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child"]
TOOLS = ("unshare", "setpriv", "prlimit")


def missing_tools() -> list[str]:
    """The util-linux programs the namespaced sandbox needs that are not under /usr/bin
    (they must be there: the code's root only holds /usr)."""
    return [tool for tool in TOOLS if not Path("/usr/bin", tool).is_file()]


def unusable_python(python_home: Path) -> str | None:
    """Why the interpreter cannot be mounted into the new root, if it cannot."""
    if str(python_home) == NEW_ROOT or str(python_home).startswith(NEW_ROOT + "/"):
        return f"the Python installation {python_home} lies under {NEW_ROOT}, where the new root is mounted"
    return None


def namespaced_argv(python: str, python_home: Path, limit_flags: str, disk_mb: int) -> list[str]:
    """``unshare`` running a setup shell that ends by exec'ing the code's process."""
    root = NEW_ROOT
    binds = ["/usr"] + ([] if str(python_home).startswith("/usr/") else [str(python_home)])
    lines = ["set -e", f"R={root}", 'mount -t tmpfs -o size=1m,nr_inodes=256,mode=755 tmpfs "$R"']
    for source in binds:
        quoted = shlex.quote(source)
        lines += [f'mkdir -p "$R"{quoted}', f'mount --rbind {quoted} "$R"{quoted}',
                  f'mount -o remount,bind,ro,nosuid,nodev "$R"{quoted}']
    for link in ("bin", "lib", "lib64", "sbin"):  # merged-/usr layouts keep these as links
        if Path("/" + link).is_symlink():
            lines.append(f'ln -s {shlex.quote(os.readlink("/" + link))} "$R"/{link}')
        elif Path("/" + link).is_dir():
            lines += [f'mkdir -p "$R"/{link}', f'mount --rbind /{link} "$R"/{link}',
                      f'mount -o remount,bind,ro,nosuid,nodev "$R"/{link}']
    lines += [
        'mkdir -p "$R"/dev "$R"/work',
        'touch "$R"/dev/null && mount --bind /dev/null "$R"/dev/null',
        f'mount -t tmpfs -o size={disk_mb}m,nr_inodes=1024,mode=1777,nosuid,nodev tmpfs "$R"/work',
        'mount -o remount,bind,ro "$R"',  # /work is the only writable place
    ]
    drop = ""
    if os.geteuid() == 0:  # see the module docstring: host uid 0 ignores the process limit
        drop = f"/usr/bin/setpriv --reuid={SANDBOX_UID} --regid={SANDBOX_UID} --clear-groups "
    lines.append(
        f"exec {drop}/usr/bin/unshare --user --map-user={SANDBOX_UID} --map-group={SANDBOX_UID} "
        f'--root="$R" --wd=/work /usr/bin/setpriv --no-new-privs --inh-caps=-all '
        f"/usr/bin/prlimit {limit_flags} "
        # python is not PID 1 of the namespace (PID 1 ignores default-action signals)
        f"-- /bin/sh -c 'HOME=/work {shlex.quote(python)} -I -S -; exit $?'"
    )
    first = ["/usr/bin/unshare"] + ([] if os.geteuid() == 0 else ["--user", "--map-root-user"])
    return first + NAMESPACE_FLAGS + [shutil.which("sh") or "/bin/sh", "-c", "\n".join(lines)]

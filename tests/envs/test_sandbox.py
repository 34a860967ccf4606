"""The sandbox against hostile code, as root and as an unprivileged user, and its
fail-closed behaviour where it cannot isolate.

The hostile suite itself is ``tests/envs/hostile.py`` (26 kinds of snippet); these tests
run it in a subprocess as each user and assert that every case returned the status of
the limit that must fire, that nothing escaped and nothing was left behind. Wall clocks
are generous (60 s) wherever the wall clock is not the limit under test, so a loaded
machine cannot turn ``output_limit`` or ``cpu_limit`` into ``timeout``.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mirage.envs import namespaces, sandbox
from mirage.envs.deepcoder import DeepCoder, DeepCoderOptions
from mirage.envs.sandbox import (
    PRETEND_NO_ISOLATION, IsolationUnavailable, SandboxLimits, probe_isolation, run_python,
)

REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=60, memory_mb=128)
TEST_USER = "mirage-sandbox-test"
# What the hostile driver needs, copied where any user can read it (the checkout itself
# may sit under a private home directory).
DRIVER_FILES = ["mirage/__init__.py", "mirage/envs/__init__.py", "mirage/envs/sandbox.py",
                "mirage/envs/namespaces.py", "tests/envs/hostile.py", "pyproject.toml"]
# Cases that escape without isolation and are harmless to let escape.
ESCAPING = ["write /tmp", "write project", "read project", "list /tmp", "parent environ",
            "tcp to 127.0.0.1", "udp send", "kill a canary", "detached daemon"]


@pytest.fixture
def isolated():
    isolation = probe_isolation()
    if not isolation.available:
        pytest.skip(f"the sandbox cannot isolate on this machine ({isolation.problem}); "
                    "the fail-closed tests below cover it")


def copy_driver(owner: int, group: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix="mirage-hostile-", dir="/tmp"))
    for name in DRIVER_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    for path in [root, *root.rglob("*")]:
        os.chown(path, owner, group)
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def run_suite(argv_prefix: list[str], python: str, home: str, owner: int, group: int,
              cases: list[str] = (), pretend_no_isolation: bool = False) -> list[dict]:
    """Run the hostile driver (as whoever ``argv_prefix`` makes it) and parse its rows."""
    root = copy_driver(owner, group)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": home, "LANG": "C.UTF-8",
           "MIRAGE_HOSTILE_SECRET": f"secret-{secrets.token_hex(8)}"}
    if pretend_no_isolation:
        env[PRETEND_NO_ISOLATION] = "1"
    try:
        done = subprocess.run(argv_prefix + [python, str(root / "tests/envs/hostile.py"), str(root)]
                              + ([",".join(cases)] if cases else []),
                              capture_output=True, text=True, timeout=600, env=env, cwd="/")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0, f"the driver died (killed by a snippet?):\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines()]


def table(rows: list[dict], who: str) -> str:
    lines = [f"hostile suite as {who}: {sum(r['contained'] for r in rows)}/{len(rows)} contained, "
             f"{sum(r['leftover_processes'] + len(r['leftover_files']) for r in rows)} left behind"]
    for r in rows:
        lines.append(f"  {r['case']:<26} {r['status']:<13} {'contained' if r['contained'] else 'ESCAPED'} "
                     f"{r['seconds']:5.2f}s {r['escaped'] or ''} {r['leftover_processes'] or ''}")
    return "\n".join(lines)


def assert_contained(rows: list[dict], who: str) -> None:
    report = table(rows, who)
    print(report)
    assert len(rows) >= 24 and all(r["isolation"] == "namespaces" for r in rows), report
    assert [r for r in rows if not r["contained"]] == [], report


def unprivileged_user() -> tuple[list[str], str, str, int, int]:
    """How to run as an unprivileged user: argv prefix, its Python, home, uid, gid."""
    if os.geteuid() != 0:
        home = pwd.getpwuid(os.getuid()).pw_dir
        return [], sys.executable, home, os.getuid(), os.getgid()
    python = shutil.which("python3", path="/usr/bin")
    if python is None:
        pytest.skip("no /usr/bin/python3 for the unprivileged user to run the driver with")
    try:
        user = pwd.getpwnam(TEST_USER)
    except KeyError:
        made = subprocess.run(["useradd", "--create-home", "--shell", "/usr/sbin/nologin", TEST_USER],
                              capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"cannot create the throwaway user {TEST_USER}: {made.stderr.strip()}")
        user = pwd.getpwnam(TEST_USER)
    prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    return prefix, python, user.pw_dir, user.pw_uid, user.pw_gid


# --------------------------------------------------------------------------- the hostile suite


@pytest.mark.slow
def test_hostile_suite_as_root(isolated):
    if os.geteuid() != 0:
        pytest.skip("not running as root; the unprivileged run covers this user")
    assert_contained(run_suite([], sys.executable, "/root", 0, 0), "root")


@pytest.mark.slow
def test_hostile_suite_as_an_unprivileged_user(isolated):
    prefix, python, home, uid, gid = unprivileged_user()
    assert_contained(run_suite(prefix, python, home, uid, gid), f"uid {uid}")


def test_the_suite_sees_escapes_when_nothing_isolates():
    """Without isolation (forced off, the explicit unsafe mode) the same checks report
    the escapes: they can fail."""
    rows = run_suite([], sys.executable, str(Path.home()), os.getuid(), os.getgid(),
                     cases=ESCAPING, pretend_no_isolation=True)
    assert [r["case"] for r in rows] == [c for c in ESCAPING]
    assert all(r["isolation"] == "none" for r in rows)
    assert [r["case"] for r in rows if r["contained"]] == [], table(rows, "unisolated")


# --------------------------------------------------------------------------- single behaviours


def test_a_plain_program_runs_isolated_as_an_unmapped_user(isolated):
    result = run_python("import os\nprint(6 * 7, os.getuid(), sorted(os.listdir('/')))", LIMITS)
    assert result.status == "ok" and result.isolation == "namespaces"
    number, uid, listing = result.stdout.split(" ", 2)
    assert (number, uid) == ("42", "65534")
    assert "etc" not in listing and "proc" not in listing and "work" in listing


def test_the_working_directory_is_the_only_writable_place(isolated):
    code = ("open('notes.txt', 'w').write('ok')\nprint(open('notes.txt').read())\n"
            "import os\nprint(os.getcwd())\nopen('/usr/escaped', 'w')")
    result = run_python(code, LIMITS)
    assert result.stdout == "ok\n/work\n" and result.status == "error"
    assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr


def test_environment_variables_do_not_reach_the_code(isolated, monkeypatch):
    monkeypatch.setenv("MIRAGE_SECRET_FOR_TEST", "s3cret")
    result = run_python("import os\nprint(sorted(os.environ))", LIMITS)
    assert result.status == "ok" and "MIRAGE_SECRET_FOR_TEST" not in result.stdout


def test_a_hostile_answer_scores_zero_and_the_observation_names_the_limit(isolated):
    env = DeepCoder(DeepCoderOptions(cpu_seconds=1, wall_seconds=60, memory_mb=128))
    env.reset(0)
    # the harness sends the answer's stdout to /dev/null, so flood stderr
    outcome = env.step("import sys\nwhile True:\n    sys.stderr.write('x' * 100000)")
    assert outcome.reward == 0.0 and env.last_run.status == "output_limit"
    assert len(env.last_run.stderr) <= 65536
    assert "Sandbox : output_limit" in env.render()


def test_limits_refuse_bad_values():
    with pytest.raises(ValueError, match="cpu_seconds must be an integer >= 1"):
        SandboxLimits(cpu_seconds=0)
    with pytest.raises(ValueError, match="wall_seconds must be > 0"):
        SandboxLimits(wall_seconds=0)


# --------------------------------------------------------------------------- fail closed


def test_without_isolation_the_sandbox_refuses_to_run_code(monkeypatch, tmp_path):
    monkeypatch.setenv(PRETEND_NO_ISOLATION, "1")
    marker = tmp_path / "ran"
    with pytest.raises(IsolationUnavailable) as info:
        run_python(f"open({str(marker)!r}, 'w')", LIMITS)
    message = str(info.value)
    assert "\n" not in message and PRETEND_NO_ISOLATION in message
    assert "user namespaces" in message and "unsafe_no_isolation=true" in message
    assert not marker.exists()


def test_the_explicit_unsafe_mode_runs_and_says_it_is_unisolated(monkeypatch):
    monkeypatch.setenv(PRETEND_NO_ISOLATION, "1")
    result = run_python("print(6 * 7)", LIMITS, unsafe_no_isolation=True)
    assert (result.status, result.stdout, result.isolation) == ("ok", "42\n", "none")


def test_a_machine_that_refuses_namespaces_fails_closed_with_the_reason(monkeypatch):
    """The probe itself, with ``unshare`` answering as it does where user namespaces are
    off (the real probe result is restored afterwards)."""
    refused = ["/bin/sh", "-c", "echo 'unshare: unshare failed: Operation not permitted' >&2; exit 1"]
    monkeypatch.setattr(namespaces, "namespaced_argv", lambda *args: refused)
    sandbox._probe_machine.cache_clear()
    try:
        isolation = probe_isolation()
        with pytest.raises(IsolationUnavailable) as info:
            run_python("print(1)", LIMITS)
    finally:
        sandbox._probe_machine.cache_clear()
    assert not isolation.available and str(info.value) == isolation.problem
    assert "unshare: unshare failed: Operation not permitted" in isolation.problem
    assert "user.max_user_namespaces" in isolation.problem and "unsafe_no_isolation=true" in isolation.problem

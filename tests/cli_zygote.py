"""Runs ``core`` commands for the tests in processes forked from one warm process.

Each ``core`` command a test runs is still a process of its own (its own exit status,
stdout, stderr, environment, working directory and ``sys.path``), but instead of a fresh
interpreter importing torch, transformers and MIRAGE (about 6 s a run on the 2-core
machine, paid by hundreds of tests) it is forked from a *zygote* that imported them once
and has computed nothing (so no thread pool is running when it forks). Modules are
imported in the zygote, never configured: whatever reads the environment at import time
(Prefect's settings) is left for the child to import.

``python tests/cli_zygote.py`` is the zygote: it reads one JSON request a line on stdin
(``argv``, ``env``, ``cwd``, ``out``, ``err``, and ``in``: a file the child reads as its
stdin, else /dev/null), forks, writes ``{"pid": ...}``, waits for the child and writes
``{"status": ...}``. :class:`Zygote` is its client in the test
process; a test that needs a real process tree (to signal or sample it) starts
``cli_argv(...)`` itself, as before. ``MIRAGE_TEST_SUBPROCESS=1`` turns the zygote off;
``MIRAGE_TEST_ZYGOTE_LOG=FILE`` logs each start of it and each command it did not serve.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

WARM_MODULES = (
    "torch", "transformers", "transformers.models.qwen2.modeling_qwen2", "mirage.builtins",
    "mirage.core.run.loop", "mirage.plugins.backend_local.backend", "mirage.plugins.verl_algorithms.register",
    "mirage.envs.plugin", "mirage.plugins.diagnostics", "mirage.plugins.filters",
)


# ---------------------------------------------------------------------- the zygote
def _child(request: dict) -> None:
    """In the forked child: become the command's process, run it, exit with its status."""
    try:
        os.setsid()
        null = os.open(request.get("in") or os.devnull, os.O_RDONLY)  # "in": a file of stdin's text
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (null, out, err):
            os.close(fd)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[1:1] = extra  # what a fresh interpreter would have put after the script's dir
        import importlib

        importlib.invalidate_caches()
        sys.argv = ["core", *request["argv"]]
        from mirage.builtins import main

        code = 0
        try:
            main()
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if not isinstance(exit_.code, (int, type(None))):
                print(exit_.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - as an interpreter would: the traceback, status 1
            import traceback

            traceback.print_exc()
            code = 1
    except BaseException:  # noqa: BLE001
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve() -> None:
    for name in WARM_MODULES:
        __import__(name)
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # a stray print must not corrupt the replies
    replies.write("ready\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()


# ---------------------------------------------------------------------- the client
IMPORT_TIME_VARIABLES = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_",
                         "TORCH", "PYTORCH_", "CUDA_", "NUMPY_", "PREFECT_", "PYTHON", "LD_")
"""Environment variables the zygote's warm modules (torch, transformers and what they
import; Prefect, should a warm module import it) or the interpreter itself read at
import: a command whose environment differs from the zygote's in one of them goes to a
fresh interpreter (``HF_HUB_OFFLINE``, ``OMP_NUM_THREADS``, ``PREFECT_API_URL``, ...).
Every other variable is read when the command runs, in the child, which has exactly the
test's environment (MIRAGE's own; what libraries the zygote never imported read, such as
``WANDB_SERVICE`` or ``MPLBACKEND``, which tests' imports and fixtures set)."""
CALL_TIME_VARIABLES = ("TORCHINDUCTOR_", "PYTHONPATH")
"""Exceptions among those: the compiler's cache, which torch sets in the test process once
something compiled (read when compiling), and ``PYTHONPATH``, which the child applies itself."""


def log(event: str) -> None:
    """With ``MIRAGE_TEST_ZYGOTE_LOG=FILE``, append what the client did (each start of the
    zygote, each command sent to a fresh interpreter and why) to FILE, one line a event."""
    path = os.environ.get("MIRAGE_TEST_ZYGOTE_LOG")
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        with open(path, "a") as file:
            file.write(f"{time.strftime('%H:%M:%S')} {worker} {test}: {event}\n")


class Zygote:
    """One warm zygote per test process, started on first use with the environment the
    test process started with."""

    def __init__(self, environment: dict[str, str]) -> None:
        self.process: subprocess.Popen | None = None
        self.environment = dict(environment)

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a command with ``env`` may be forked from the zygote."""
        names = set(env) | set(self.environment)
        differ = sorted(n for n in names if n.startswith(IMPORT_TIME_VARIABLES)
                        and not n.startswith(CALL_TIME_VARIABLES) and env.get(n) != self.environment.get(n))
        if differ:
            log(f"fresh interpreter: the environment differs in {', '.join(differ)}")
        return not differ

    def _start(self) -> subprocess.Popen:
        if self.process is None or self.process.poll() is not None:
            log("starting the zygote" if self.process is None else
                f"restarting the zygote (it ended with {self.process.returncode})")
            self.process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True, bufsize=1,
                                            env=self.environment)
            assert self.process.stdout.readline().strip() == "ready", "the CLI zygote did not start"
        return self.process

    def _reply(self, timeout: float | None) -> dict | None:
        stdout = self._start().stdout
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready:
            return None
        line = stdout.readline()
        if not line:
            raise RuntimeError("the CLI zygote died")
        return json.loads(line)

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float,
            scratch: Path, stdin: str | None = None) -> tuple[int, str, str]:
        """``stdin``: the text the command reads on its standard input (none: /dev/null)."""
        scratch.mkdir(parents=True, exist_ok=True)
        stamp = f"{os.getpid()}-{time.monotonic_ns()}"
        out, err, given = scratch / f"{stamp}.out", scratch / f"{stamp}.err", scratch / f"{stamp}.in"
        request = {"argv": argv, "env": env, "cwd": str(cwd), "out": str(out), "err": str(err)}
        if stdin is not None:
            given.write_text(stdin)
            request["in"] = str(given)
        process = self._start()
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        pid = self._reply(30)["pid"]
        reply = self._reply(timeout)
        if reply is None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reply(30)
            raise subprocess.TimeoutExpired(["core", *argv], timeout)
        try:
            return reply["status"], out.read_text(errors="replace"), err.read_text(errors="replace")
        finally:
            for path in (out, err, given):
                path.unlink(missing_ok=True)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()


if __name__ == "__main__":
    serve()

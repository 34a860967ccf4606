"""The CLI zygote (tests/cli_zygote.py) serves the suite's ``core`` commands: an ordinary
test's environment is the zygote's, so its commands fork from the warm process instead of
starting a fresh interpreter (about 5-8 s each); a library read at import is still
protected (a changed ``OMP_NUM_THREADS`` goes to a fresh interpreter), while what only
the command itself reads (MIRAGE's variables, those of libraries the zygote never
imported, which tests' imports and fixtures set) does not stop the zygote serving it."""

from __future__ import annotations

import os


def test_an_ordinary_tests_commands_fork_from_the_zygote(cli, cli_zygote):
    assert cli_zygote.serves(dict(os.environ))
    code, out, err = cli("--version")
    assert code == 0 and out.startswith("mirage-rl ")
    assert cli_zygote.process is not None and cli_zygote.process.poll() is None


def test_a_variable_read_at_import_sends_the_command_to_a_fresh_interpreter(monkeypatch, cli_zygote):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert not cli_zygote.serves(dict(os.environ))
    monkeypatch.setenv("MIRAGE_ANYTHING", "x")  # MIRAGE's own variables are read when a command runs
    monkeypatch.setenv("WANDB_SERVICE", "x")  # as are those of libraries the zygote never imported
    monkeypatch.setenv("MPLBACKEND", "agg")
    monkeypatch.setenv("OMP_NUM_THREADS", cli_zygote.environment.get("OMP_NUM_THREADS", ""))
    if "OMP_NUM_THREADS" not in cli_zygote.environment:
        monkeypatch.delenv("OMP_NUM_THREADS")
    assert cli_zygote.serves(dict(os.environ))

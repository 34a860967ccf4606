"""The ``core`` command line (mirage/core/cli/program.py): bad input fails fast and cleanly.

Every bad value must give exit code 2 and one stderr line naming it (and, for an unknown
name, the valid ones), before any model work and without touching the run store. The
matrix runs in-process (fast); a few cases also run as real subprocesses so that import
warnings or tracebacks on stderr would be caught.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from mirage.core.cli.program import app
from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore

# (extra arguments, fragments the one-line message must contain)
BAD_INPUTS = {
    "unknown env": (["--env", "nosuch"], ["'nosuch'", "valid: countdown, deepcoder, frozenlake, metamathqa, searchqa, sokoban, webshop"]),
    "unknown filter": (["--filter", "nosuch"], ["'nosuch'", "valid: entropy, length, none, quartile, top_k, top_p, trajectory"]),
    "unknown algo": (["--algo", "nosuch"], ["'nosuch'", "valid: dapo, drgrpo, grpo, ppo"]),
    "rho zero": (["--rho", "0"], ["rho", "got 0"]),
    "rho above one": (["--rho", "1.2"], ["rho", "1.2"]),
    "zero steps": (["--steps", "0"], ["steps", "got 0"]),
    "group size 1 with top_p": (["--group-size", "1", "--filter", "top_p"],
                                ["top_p", "group size", "got 1"]),
    "missing model dir": (["--model", "/nonexistent/dir"], ["/nonexistent/dir"]),
    "slip out of range": (["--env-opt", "slip=2"], ["slip", "got 2"]),
    "unknown env option": (["--env-opt", "bogus=1"], ["bogus"]),
    "env option without =": (["--env-opt", "slip"], ["--env-opt", "'slip'"]),
    "unknown run to resume": (["--resume", "nosuch-run"], ["'nosuch-run'"]),
}


def files_under(path: Path) -> list[Path]:
    return sorted(p.relative_to(path) for p in path.rglob("*"))


def invoke(args: list[str]):
    return CliRunner().invoke(app, args, env={"COLUMNS": "200"})


def assert_one_line_error(code: int, stderr: str, fragments: list[str]) -> str:
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{stderr}"
    line = lines[0]
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_fails_with_one_line_and_leaves_the_store_alone(
    case, populated_store, tiny_config_file, contents
):
    args, fragments = BAD_INPUTS[case]
    store = RunStore(populated_store)
    before = contents(store), files_under(populated_store.parent)
    result = invoke(["run", "--config", str(tiny_config_file), "--db", str(populated_store),
                     "--quiet", *args])
    assert result.stdout == ""
    assert_one_line_error(result.exit_code, result.stderr, fragments)
    after = contents(store), files_under(populated_store.parent)
    assert after == before


@pytest.mark.parametrize("case", ["unknown env", "rho above one"])
def test_bad_input_in_a_real_process(case, cli, tiny_config_file, tmp_path):
    args, fragments = BAD_INPUTS[case]
    db = tmp_path / "real" / "runs.duckdb"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--quiet", *args)
    assert out == ""
    assert_one_line_error(code, err, fragments)


@pytest.mark.parametrize("case", ["unknown env", "zero steps", "missing model dir"])
def test_bad_input_does_not_create_a_store(case, tiny_config_file, tmp_path):
    args, fragments = BAD_INPUTS[case]
    db = tmp_path / "fresh" / "runs.duckdb"
    result = invoke(["run", "--config", str(tiny_config_file), "--db", str(db), "--quiet", *args])
    assert_one_line_error(result.exit_code, result.stderr, fragments)
    assert not db.exists(), "a rejected run created the store file"


def test_missing_config_file(tmp_path):
    db = tmp_path / "runs.duckdb"
    result = invoke(["run", "--config", str(tmp_path / "nope.yaml"), "--db", str(db)])
    assert_one_line_error(result.exit_code, result.stderr, ["nope.yaml", "does not exist"])
    assert not db.exists()


def test_bad_value_in_the_config_file(make_config_file, populated_store, contents):
    config = make_config_file("bad.yaml", rollout={"prompts": 2, "group_size": 4,
                                                   "temperature": -1.0})
    before = contents(RunStore(populated_store))
    result = invoke(["run", "--config", str(config), "--db", str(populated_store)])
    assert_one_line_error(result.exit_code, result.stderr, ["temperature", "-1.0"])
    assert contents(RunStore(populated_store)) == before


def test_unknown_key_in_the_config_file(make_config_file, populated_store):
    config = make_config_file("bad.yaml", stepz=3)
    result = invoke(["run", "--config", str(config), "--db", str(populated_store)])
    assert_one_line_error(result.exit_code, result.stderr, ["stepz"])


def test_command_line_overrides_the_config_file(make_config_file, populated_store):
    # The file says frozenlake; --env on the command line wins (and is then rejected).
    config = make_config_file("ok.yaml")
    result = invoke(["run", "--config", str(config), "--db", str(populated_store),
                     "--env", "nosuch"])
    assert_one_line_error(result.exit_code, result.stderr, ["'nosuch'"])


# --------------------------------------------------------------------------- help


def help_entries(text: str) -> dict[str, str]:
    """``--option`` -> its help text, from rich or plain help output."""
    options = text[text.index("Options"):]  # the command's docstring may mention options
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", options).split())
    parts = re.split(r"(?:^| )(--[a-z][a-z-]*)(?= )", flat)
    entries: dict[str, str] = {}
    pending: list[str] = []  # "--quiet --no-quiet" share one help text
    for name, body in zip(parts[1::2], parts[2::2]):
        pending.append(name)
        if body.strip() not in ("", "/"):
            for flag in pending:
                entries.setdefault(flag, body.strip())
            pending = []
    return entries


def run_command_options() -> dict[str, object]:
    """``--name`` -> click parameter of every option of ``core run`` (but --help)."""
    command = typer.main.get_command(app).commands["run"]
    return {param.opts[0]: param for param in command.params if param.opts[0] != "--help"}


def test_run_help_documents_every_option_with_its_default(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that rich does not wrap help text
    code, out, err = cli("run", "--help")
    assert code == 0, err
    entries = help_entries(out)
    d = RunConfig()
    config_defaults = {
        "--env": d.env.name, "--filter": d.filter.name, "--rho": d.filter.rho,
        "--algo": d.algorithm.name, "--steps": d.steps, "--seed": d.seed,
        "--prompts": d.rollout.prompts, "--group-size": d.rollout.group_size,
        "--lr": d.algorithm.lr, "--entropy-coef": d.algorithm.entropy_coef,
        "--kl-coef": d.algorithm.kl_coef, "--val-every": d.validation.every,
        "--val-episodes": d.validation.episodes,
    }
    options = run_command_options()
    assert set(config_defaults) <= set(options)
    missing = []
    for option, param in options.items():
        assert option in entries, f"{option} missing from core run --help"
        assert len(entries[option].split()) >= 2, f"{option} has no help text"
        if option in config_defaults:
            expected = f"[default: {config_defaults[option]}]"
            if expected not in entries[option]:
                missing.append(f"{option} (expected {expected})")
        elif "[default:" in (param.help or "") and "[default: " not in entries[option]:
            missing.append(option)  # the source states a default that the help hides
    assert not missing, "defaults not shown in core run --help: " + ", ".join(missing)


def test_no_arguments_prints_help_and_exits_2():
    """No command is a usage error (click's ``no_args_is_help``: the help, on stderr, and
    exit status 2, as for every other usage error)."""
    result = invoke([])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("Usage: ") and "[OPTIONS] COMMAND [ARGS]..." in result.stderr
    assert "run" in result.stderr and "plugins" in result.stderr


@pytest.mark.slow
def test_quiet_prints_only_the_result_line(cli, tiny_config_file, tmp_path, monkeypatch):
    """--quiet silences every progress bar, the warm start's included: a fresh cache makes
    the warm start run (and it would draw its bar on stderr)."""
    monkeypatch.setenv("MIRAGE_CACHE", str(tmp_path / "fresh-cache"))
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--quiet", "--steps", "1",
                         "--set", "model.options.warmstart_steps=3")
    assert code == 0, err
    assert err == ""
    (line,) = out.splitlines()
    run_id = re.fullmatch(rf"run (\S+) finished; results in {re.escape(str(db))}", line).group(1)
    (backend,) = [e for e in RunStore(db).events(run_id) if e["kind"] == "backend"]
    assert '"warmstart_cached": false' in backend["message"]


def test_options_set_on_an_experiment_leave_its_base_alone(monkeypatch):
    """--experiment starts from a copy of the experiment's base: options never write into it."""
    from mirage.core.cli import program as core_cli
    from mirage.core.cli.run_options import GivenOptions, options
    from mirage.core.run.experiments import Experiment

    experiment = Experiment(base={"env": {"name": "frozenlake", "options": {"slip": 0.1}}})
    monkeypatch.setattr(core_cli, "load_registry", lambda registry: {"e": experiment})
    data = core_cli._start_data("e", None, None)
    env, env_opt = options("--env", "--env-opt")
    core_cli._set_options(data, GivenOptions(((env, "sokoban"), (env_opt, ["size=4"]))), {"steps": 2})
    assert data == {"env": {"name": "sokoban", "options": {"slip": 0.1, "size": 4}}, "steps": 2}
    assert experiment.base == {"env": {"name": "frozenlake", "options": {"slip": 0.1}}}

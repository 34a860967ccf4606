"""A generated fuzz test over every command the ``core`` program exposes (issue: bad input
on any command is refused before any work, so a new command is covered the day it lands).

The cases are generated from the CLI itself, not from a hand-written list: the click group
that ``mirage.builtins.cli()`` builds (core's own commands and those every built-in
command plugin adds) gives the commands, and each command's params give the options and
arguments. Each param gets the bad values of its class:

* numbers (INT/FLOAT, ranged or not): empty, negative, nan, inf, 1e400, a 20-digit
  number and a word;
* paths (and ``--model``): empty, a missing path, a directory, a non-UTF-8 file and a
  text file that is no DuckDB store, as far as each is bad for the path's role (a store,
  an input file, an input folder, a file or folder to write, a new file);
* names (an environment, filter, algorithm, backend, experiment, run reference, ...):
  empty and an unknown name; free text (a tag, a name): empty; a host to listen on:
  empty, an impossible IP address and a name with spaces;
  ``KEY=VALUE`` options: empty, no ``=``, an unknown key; comma-separated numbers: the
  number values;
* bool flags: ``--flag=VALUE``; choices: empty and an unknown choice.

Every other required argument gets a valid value (a run reference is the id of the run in
a copy of the schema fixture store, passed with ``--db``), so each case isolates one bad
value. Each case must exit with status 2, print no traceback, print at most one line on
stderr outside click's usage block (the project's own ``error: ...`` line), and leave the
store byte-identical with nothing new beside it. Cases run in-process on the CliRunner;
a tripwire makes any command that goes on to start work fail the case by name.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import re
import shlex
import shutil
import traceback
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import typer
from typer.testing import CliRunner

from mirage.builtins import cli

APP = cli()  # the whole core program, the command plugins' commands included
GROUP = typer.main.get_command(APP)
RUNNER = CliRunner()
STORES = Path(__file__).parent / "data" / "stores"  # the old_store fixture's files

# ---- the bad values, by the param's class --------------------------------------------

EMPTY, MISSING, DIRECTORY, NOT_UTF8, TEXT_FILE, STORE = (
    "", "{missing}", "{dir}", "{non-utf8}", "{text-file}", "{store}")
SHOWN = {EMPTY: "''", MISSING: "<missing>", DIRECTORY: "<dir>", NOT_UTF8: "<non-utf8>",
         TEXT_FILE: "<text-file>"}

NUMBER = ["", "-1", "nan", "inf", "1e400", "99999999999999999999", "abc"]
FILEISH = [EMPTY, MISSING, DIRECTORY, NOT_UTF8, TEXT_FILE]
VALUES: dict[str, list[str]] = {
    "number": NUMBER,
    "flag": ["", "abc"],  # given as --flag=VALUE: a flag takes no value
    "bool": ["", "abc"],
    "choice": ["", "no-such-thing"],
    "name": ["", "no-such-thing"],       # names a registered thing: env, filter, run, ...
    "text": [""],                         # free text: any non-empty text is valid
    "address": ["", "999.1.2.3", "not a host!"],  # a host to listen on: an IP address or a host name
    "pairs": ["", "no-such-thing", "no_such.path=1"],  # KEY=VALUE options
    "int-list": ["", "abc", "-1", "nan", "99999999999999999999"],
    "store": FILEISH,                     # a DuckDB run store to read or write
    "model": FILEISH,                     # a checkpoint directory (or a hub id)
    "input": FILEISH,                     # a file read: config, registry, notes
    "input-dir": FILEISH,                 # a folder read: an exported study
    "output-file": [EMPTY, DIRECTORY],    # a file written (missing or existing is fine)
    "output-dir": [EMPTY, TEXT_FILE],     # a folder written (missing or existing is fine)
    "new-file": [EMPTY, DIRECTORY, TEXT_FILE],  # a file created (must not exist)
}

# Roles the param's type alone does not tell, by its name (the function argument's name).
ROLES_BY_NAME = {
    "db": "store", "from_store": "store", "model": "model",
    "results": "input-dir", "restore": "new-file",
    "note": "text", "text": "text", "name": "text", "tag": "text", "tags": "text",
    "host": "address", "ray_address": "text",
    "set_": "pairs", "grid": "pairs", "where": "pairs", "env_opt": "pairs",
    "seeds": "int-list",
}

# A valid value for a required param a case does not fuzz (by the param's name).
RUN_ID = "{run-id}"
VALID_BY_NAME: dict[str, str] = {
    "run": RUN_ID, "left": RUN_ID, "right": RUN_ID,
    "text": "a note", "name": "fuzz-renamed", "env": "frozenlake",
    "experiment": "{experiment}",
}
VALID_BY_COMMAND = {("tag", "tags"): "fuzz-new", ("untag", "tags"): "fuzz",  # untag: a tag it has
                    ("merge", "run_step"): RUN_ID + "@0",  # the prepared run's starting policy
                    ("merge", "out"): MISSING,  # a folder not written yet
                    ("warmstart", "model"): "HuggingFaceTB/SmolLM2-135M-Instruct"}  # a hub id: never reached
STORE_TAG = "fuzz"  # the prepared run carries it, so `untag RUN fuzz` is valid

# Bad values that are valid for that option, each with the reason.
ACCEPTED: dict[str, str] = {
    "note-TEXT=''": "`core note RUN \"\"` clears the note (documented in its help)",
    "run--db=<missing>": "core run creates a new store (and its folders) at --db",
    "sweep--db=<missing>": "core sweep creates a new store (and its folders) at --db",
    "serve--db=<missing>": "the served deployments create the store at --db",
    "app--db=<missing>": "core app opens a store not written yet and shows runs as they come "
                         "(mirage/app/commands.py)",
    "report--notes=<missing>": "the researcher's readings are optional: a missing --notes file is none",
    "sweeps--last=99999999999999999999": "--last bounds a read-only listing: a count above the "
                                         "sweeps there lists them all",
    "runs--experiment=no-such-thing": "a filter over stored runs: they may name experiments of "
                                      "another registry, or ones since dropped; none match",
}


# ---- introspection: the class of a param -----------------------------------------------

_CLICK_TYPES = {"IntParamType": "number", "IntRange": "number", "FloatParamType": "number",
                "FloatRange": "number", "Path": "path", "File": "path", "Choice": "choice",
                "BoolParamType": "bool", "StringParamType": "string", "UnprocessedParamType": "string"}


def _base_class(param: Any) -> str:
    """number, path, choice, bool, flag or string: from click's ParamType where the param
    has one (click's own params), else from typer's annotation (typer >= 0.29 coerces
    values itself and its params carry no click type)."""
    if getattr(param, "is_flag", False):
        return "flag"
    click_type = getattr(param, "type", None)
    if click_type is not None:
        return _CLICK_TYPES.get(type(click_type).__name__, "string")
    annotation = param.type_descriptor.annotation
    if get_origin(annotation) in (list, tuple):
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal or (isinstance(annotation, type) and issubclass(annotation, Enum)):
        return "choice"
    if annotation is bool:
        return "bool"
    if annotation in (int, float):
        return "number"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    return "string"


def param_class(param: Any) -> str:
    """The key into VALUES: the base class, refined by the param's role for paths and
    strings (by its name, else by its help text; an unknown string is a name)."""
    base = _base_class(param)
    if base not in ("path", "string"):
        return base
    if param.name in ROLES_BY_NAME:
        return ROLES_BY_NAME[param.name]
    if base == "string":
        return "name"
    text = (getattr(param, "help", None) or "").lower()
    if "folder" in text or "directory" in text:
        return "output-dir"
    if "write" in text:
        return "output-file"
    return "input"


def label(param: Any) -> str:
    return param.opts[0] if param.param_type_name == "option" else param.name.upper()


def is_option(param: Any) -> bool:
    return param.param_type_name == "option"


# ---- the cases ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    command: str
    param: str      # the param's name
    label: str      # --steps, RUN
    value: str      # the bad value (placeholders in braces)

    @property
    def id(self) -> str:
        sep = "" if self.label.startswith("-") else "-"
        return f"{self.command}{sep}{self.label}={SHOWN.get(self.value, self.value)}"

    def argv(self) -> list[str]:
        """The command line with placeholders: the bad value, and a valid value for
        every other required param, ``--db`` (the prepared store) when the command has
        one, and the option a ``with --X:`` option needs."""
        command = GROUP.commands[self.command]
        params = {p.name: p for p in command.params}
        fuzzed = params[self.param]
        options: list[str] = []
        positional: list[str] = []
        needed = {p.name for p in command.params if p.required}
        if "db" in params:
            needed.add("db")
        if "yes" in params and _base_class(params["yes"]) == "flag":
            needed.add("yes")  # no prompt: a bad value that got through would delete
        help_text = getattr(fuzzed, "help", None) or ""
        if match := re.match(r"with (--[a-z-]+)", help_text):
            needed |= {p.name for p in command.params if is_option(p) and match.group(1) in p.opts}
        for param in command.params:
            if param.name != self.param and param.name not in needed:
                continue
            flag = _base_class(param) == "flag"
            value = self.value if param is fuzzed else None if flag else valid_value(self.command, param)
            if not is_option(param):
                positional.append(value)
            elif flag:
                options.append(param.opts[0] if value is None else f"{param.opts[0]}={value}")
            else:
                options += [param.opts[0], value]
        dashdash = ["--"] if any(v.startswith("-") for v in positional) else []
        return [self.command, *options, *dashdash, *positional]


def valid_value(command: str, param: Any) -> str:
    if param.name == "db" or param_class(param) == "store":
        return STORE
    if (command, param.name) in VALID_BY_COMMAND:
        return VALID_BY_COMMAND[command, param.name]
    if param.name in VALID_BY_NAME:
        return VALID_BY_NAME[param.name]
    raise LookupError(f"core {command}: no valid value for {label(param)} (required by the "
                      f"fuzz cases of another param); add one to VALID_BY_NAME in {__file__}")


def generate() -> list[Case]:
    cases = []
    for name, command in GROUP.commands.items():
        for param in command.params:
            if getattr(param, "hidden", False) or param.name in ("help",):
                continue
            cases += [Case(name, param.name, label(param), value) for value in VALUES[param_class(param)]]
    return cases


CASES = generate()


def listed_commands() -> set[str]:
    """The commands ``core --help`` lists."""
    result = RUNNER.invoke(APP, ["--help"], prog_name="core", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    section = result.stdout.split("Commands:", 1)[1]
    return {m.group(1) for m in re.finditer(r"^\s{2}([a-z][a-z0-9-]*)\s", section, re.MULTILINE)}


def test_every_command_core_help_lists_has_a_case():
    listed = listed_commands()
    assert listed, "found no commands in `core --help`"
    assert listed <= set(GROUP.commands), listed - set(GROUP.commands)
    uncovered = sorted(listed - {case.command for case in CASES})
    assert not uncovered, f"commands without a fuzz case: {uncovered}"


def test_the_case_ids_are_unique_and_accepted_cases_exist():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert set(ACCEPTED) <= set(ids), set(ACCEPTED) - set(ids)


# ---- the fixtures: a prepared store, the bad files, the tripwire -----------------------

class BeganWork(Exception):
    """A command went on to start work with a bad value."""


def _tripwire(where: str):
    def trip(*args: Any, **kwargs: Any) -> Any:
        raise BeganWork(f"began work with a bad value: reached {where}")
    return trip


@pytest.fixture
def tripwire(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every place where a command's work begins raises BeganWork. Functions that check
    their input before their work (``execute``, ``run_preflight``, ``serve_registry``,
    ``restore_study``, ``export_study``) keep their checks: the wire sits where the work
    starts inside them."""
    import os

    import mirage.app.launch
    import mirage.core.cli.run_commands
    import mirage.core.run.loop
    import mirage.flows.serve
    import mirage.flows.supervise
    import mirage.flows.sweep
    import mirage.plugins.backend_local.warmstart
    import mirage.report.render
    import mirage.report.results

    loop = mirage.core.run.loop
    real_execute = loop.execute

    def execute(*args: Any, **kwargs: Any) -> Any:  # a run: validates, then opens a session
        try:
            return real_execute(*args, **kwargs)
        except BeganWork as error:
            raise BeganWork(f"{error} (mirage.core.run.loop.execute validated and started the run)") from None

    for target, where in (
        (loop, "open_session"), (loop, "_train"),                   # run, preflight, warmstart
        (mirage.plugins.backend_local.warmstart, "build"),          # warmstart --rebuild
        (mirage.flows.supervise, "supervise"), (mirage.flows.supervise, "watch_parent"),  # sweep
        (mirage.flows.sweep, "sweep"),                              # the sweep flow
        (mirage.flows.serve, "prefect_environment"), (mirage.flows.serve, "start_server"),  # serve
        (mirage.app.launch, "streamlit_argv"), (os, "execv"),       # app
        (mirage.report.render, "build_report"),                     # report rendering
        (mirage.core.cli.run_commands, "export_runs"),                  # export writes files
    ):
        monkeypatch.setattr(target, where, _tripwire(f"{target.__name__}.{where}"))
    monkeypatch.setattr(loop, "execute", execute)
    # report --from-store / --restore: export_study and restore_study check, then write
    # the study with duckdb.connect
    monkeypatch.setattr(mirage.report.results, "duckdb",
                        type("NoDuckDB", (), {"connect": staticmethod(_tripwire(
                            "mirage.report.results (export_study/restore_study writing the study)"))}))
    for name in ("PREFECT_API_URL", mirage.flows.supervise.SUPERVISED, "MIRAGE_REGISTRY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def prepared_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The newest fixture store (the one ``old_store`` copies: a tiny stored 2-step run and
    a one-cell sweep), its run tagged ``fuzz``; a copy goes to each case."""
    from mirage.core.store.file import SCHEMA_VERSION
    from mirage.core.store.run_store import RunStore

    path = tmp_path_factory.mktemp("fuzz-template") / "runs.duckdb"
    with gzip.open(STORES / f"schema_{SCHEMA_VERSION}.duckdb.gz") as packed, path.open("wb") as out:
        shutil.copyfileobj(packed, out)
    store = RunStore(path)
    (run,) = store.list_runs()
    store.update_run(run["run_id"], tags=[STORE_TAG])
    return path, run["run_id"]


@functools.cache
def valid_experiment() -> str:
    from mirage.core.run.experiments import load_registry

    return next(iter(load_registry(None)))


def snapshot(path: Path) -> tuple:
    """A file's sha256 and the names beside it (a .wal, a marker, checkpoints)."""
    if path.is_dir():
        return ("dir", tuple(sorted(p.name for p in path.iterdir())))
    if not path.exists():
        return ("missing",)
    return (hashlib.sha256(path.read_bytes()).hexdigest(), tuple(sorted(p.name for p in path.parent.iterdir())))


@pytest.fixture
def places(tmp_path: Path, prepared_store: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The placeholders' values for one case, in its own tmp_path (also the working
    directory, so a relative default such as `export` or docs/ lands there)."""
    template, run_id = prepared_store
    store = tmp_path / "store" / "runs.duckdb"
    store.parent.mkdir()
    shutil.copyfile(template, store)
    (tmp_path / "files").mkdir()
    text = tmp_path / "files" / "notes.txt"
    text.write_text("this is a text file, not a DuckDB run store\n")
    latin1 = tmp_path / "files" / "latin1.yaml"
    latin1.write_bytes(b"steps: 3\n# caf\xe9 \xff\xfe\n")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return {STORE: str(store), MISSING: str(tmp_path / "missing" / "no-such-thing"),
            DIRECTORY: str(folder), NOT_UTF8: str(latin1), TEXT_FILE: str(text),
            RUN_ID: run_id, "{experiment}": valid_experiment()}


# ---- the test ----------------------------------------------------------------------------

USAGE_START = ("Usage: ", "Error: ")  # click's usage block, or its bare error line


def lines_outside_click_usage(stderr: str) -> list[str]:
    """stderr's non-blank lines before click's usage error (``Usage: ...``, ``Try 'core X
    --help' for help.``, ``Error: ...`` or a box; or a bare ``Error: ...`` line when click
    fails while parsing), which runs to the end of the output."""
    outside = []
    for line in stderr.splitlines():
        if line.startswith(USAGE_START) or line.startswith(("╭", "│", "╰")):
            break
        if line.strip():
            outside.append(line)
    return outside


def click_usage_error(stderr: str) -> bool:
    return any(line.startswith(USAGE_START) for line in stderr.splitlines())


def params_of(cases: list[Case]) -> list[Any]:
    return [pytest.param(case, id=case.id) for case in cases]


@pytest.mark.parametrize("case", params_of([c for c in CASES if c.id in ACCEPTED]))
def test_an_accepted_value_is_taken_without_a_traceback(case: Case, places: dict[str, str],
                                                        tripwire: None) -> None:
    """The values ACCEPTED lists are valid for their option (each with its reason): the
    command takes them, finishing (exit 0) or beginning its work, and never raises."""
    argv = [places.get(arg, arg) for arg in case.argv()]
    result = RUNNER.invoke(APP, argv, prog_name="core", env={"COLUMNS": "200"})
    began = isinstance(result.exception, BeganWork)
    assert began or result.exit_code == 0, (ACCEPTED[case.id], result.exit_code, result.stderr)
    assert began or result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("case", params_of([c for c in CASES if c.id not in ACCEPTED]))
def test_a_bad_value_is_refused_before_any_work(case: Case, places: dict[str, str], tripwire: None) -> None:
    argv = [places.get(arg, arg) for arg in case.argv()]
    watched = sorted({Path(places[key]) for key in (STORE, TEXT_FILE, NOT_UTF8, DIRECTORY)
                      if places[key] in argv})
    before = {path: snapshot(path) for path in watched}
    result = RUNNER.invoke(APP, argv, prog_name="core", env={"COLUMNS": "200"})
    stdout, stderr = result.stdout, result.stderr
    problems = []
    if isinstance(result.exception, BeganWork):
        problems.append(str(result.exception))
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        ours = [f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno} {f.name}"
                 for f in traceback.extract_tb(result.exception.__traceback__) if "/mirage/" in f.filename]
        where = " ... ".join(dict.fromkeys([ours[0], ours[-1]])) if ours else "?"
        message = (str(result.exception).splitlines() or [""])[0]
        problems.append(f"uncaught {type(result.exception).__name__} (a traceback for the user) "
                        f"in {where}: {message}")
    if result.exit_code != 2:
        problems.append(f"exit code {result.exit_code}, expected 2")
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        if "Traceback" in text:
            problems.append(f"a traceback on {name}")
    outside = lines_outside_click_usage(stderr)
    if len(outside) > 1:
        problems.append(f"{len(outside)} lines on stderr outside click's usage block, expected one")
    elif outside and not outside[0].startswith("error: "):
        problems.append(f"stderr line does not start with 'error: ': {outside[0]!r}")
    elif not outside and not click_usage_error(stderr) and result.exit_code == 2:
        problems.append("exit 2 without a word on stderr")
    for path in watched:
        if snapshot(path) != before[path]:
            what = "the store" if str(path) == places[STORE] else str(path)
            problems.append(f"{what} changed: {before[path]} -> {snapshot(path)}")
    if problems:
        pytest.fail(f"core {shlex.join(argv)}\n  " + "\n  ".join(problems)
                    + f"\n  stderr: {stderr.strip()!r}\n  stdout: {stdout.strip()[:400]!r}", pytrace=False)

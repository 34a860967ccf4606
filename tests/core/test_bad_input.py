"""issue 22 (4): every bad input is refused before any work: one stderr line, exit 2,
and the run store byte-identical. Numbers are checked for finiteness and range, paths
for existence, type, permissions and encoding, registries for empty axes, and the sweep
options, all before the warm start (or Prefect) begins."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mirage.builtins import cli

app = cli()  # the whole core program: `sweep` comes from the flows' command plugin

NOT_UTF8 = b"steps: 3\n# caf\xe9 \xff\xfe\n"

# name -> (command line, with {config} {db} {registry} {tmp} placeholders; fragments the
# one-line message must contain). {db} is a store holding one run, checked byte for byte.
CASES: dict[str, tuple[list[str], list[str]]] = {
    # ---- numbers: finiteness
    "lr inf": (["run", "--lr", "inf"], ["algorithm.lr", "finite", "inf"]),
    "lr -inf": (["run", "--lr", "-inf"], ["algorithm.lr", "finite"]),
    "lr nan": (["run", "--lr", "nan"], ["algorithm.lr", "finite", "nan"]),
    "entropy coef nan": (["run", "--entropy-coef", "nan"], ["algorithm.entropy_coef", "finite"]),
    "kl coef inf": (["run", "--kl-coef", "inf"], ["algorithm.kl_coef", "finite"]),
    "rho nan": (["run", "--rho", "nan"], ["filter.rho"]),
    "rho inf": (["run", "--rho", "inf"], ["filter.rho"]),
    "config format_penalty .nan": (["run", "--config", "{tmp}/penalty_nan.yaml"], ["env.format_penalty", "finite"]),
    "config format_penalty .inf": (["run", "--config", "{tmp}/penalty_inf.yaml"], ["env.format_penalty", "finite"]),
    "config temperature .inf": (["run", "--config", "{tmp}/temperature_inf.yaml"], ["rollout.temperature", "finite"]),
    "config max_grad_norm .nan": (["run", "--config", "{tmp}/grad_nan.yaml"], ["algorithm.max_grad_norm", "finite"]),
    # ---- numbers: range
    "lr zero": (["run", "--lr", "0"], ["algorithm.lr", "greater than 0"]),
    "lr negative": (["run", "--lr", "-1e-5"], ["algorithm.lr", "-1e-05"]),
    "entropy coef negative": (["run", "--entropy-coef", "-1"], ["algorithm.entropy_coef"]),
    "kl coef negative": (["run", "--kl-coef", "-0.1"], ["algorithm.kl_coef"]),
    "rho negative": (["run", "--rho", "-0.5"], ["filter.rho"]),
    "seed -1": (["run", "--seed", "-1"], ["seed", "greater than or equal to 0", "got -1"]),
    "seed 2**32": (["run", "--seed", str(2**32)], ["seed", "4294967295"]),
    "seed 10**30": (["run", "--seed", str(10**30)], ["seed", "4294967295"]),
    "config validation seed -5": (["run", "--config", "{tmp}/val_seed.yaml"], ["validation.seed", "-5"]),
    "prompts 0": (["run", "--prompts", "0"], ["rollout.prompts", "got 0"]),
    "group size 0": (["run", "--group-size", "0"], ["rollout.group_size", "got 0"]),
    "P x G 1 x 1000000": (["run", "--prompts", "1", "--group-size", "1000000", "--filter", "none"],
                          ["1000000 trajectories", "65536", "memory"]),
    "P x G 300 x 300": (["run", "--prompts", "300", "--group-size", "300"], ["90000 trajectories"]),
    "val episodes 0": (["run", "--val-episodes", "0"], ["validation.episodes"]),
    "val episodes 10**6": (["run", "--val-episodes", str(10**6)], ["validation.episodes", "65536"]),
    "val every 0": (["run", "--val-every", "0"], ["validation.every"]),
    "steps negative": (["run", "--steps", "-3"], ["steps", "got -3"]),
    "steps 2**31": (["run", "--steps", str(2**31)], ["steps", "2147483647"]),
    "max empty steps 0": (["run", "--max-empty-steps", "0"], ["invalid max_empty_steps"]),
    "config max_new_tokens 10**6": (["run", "--config", "{tmp}/tokens.yaml"], ["rollout.max_new_tokens", "32768"]),
    # ---- paths: --config
    "config not UTF-8": (["run", "--config", "{tmp}/latin1.yaml"], ["--config", "not UTF-8"]),
    "config is a directory": (["run", "--config", "{tmp}"], ["--config", "is not a file"]),
    "config empty path": (["run", "--config", ""], ["--config", "not a file"]),
    "config missing": (["run", "--config", "{tmp}/nope.yaml"], ["nope.yaml", "does not exist"]),
    "config not a mapping": (["run", "--config", "{tmp}/list.yaml"], ["expected a mapping"]),
    # ---- paths: --db
    "db is a directory": (["run", "--db", "{tmp}"], ["--db", "is a directory"]),
    "db empty": (["run", "--db", ""], ["--db", "empty path"]),
    "db not DuckDB": (["run", "--db", "{tmp}/notes.txt"], ["--db", "not a DuckDB database file"]),
    "db empty file": (["run", "--db", "{tmp}/empty.duckdb"], ["not a DuckDB database file"]),
    "db read-only place": (["run", "--db", "/proc/mirage-test/runs.duckdb"], ["cannot be created", "/proc"]),
    "db under a file": (["run", "--db", "{tmp}/notes.txt/runs.duckdb"], ["is a file, not a folder"]),
    # ---- paths: --model
    "model empty": (["run", "--model", ""], ["--model", "empty value"]),
    "model missing local dir": (["run", "--model", "./no/such/checkpoint"], ["does not exist"]),
    "model is a file": (["run", "--model", "{tmp}/notes.txt"], ["not a checkpoint directory"]),
    "model dir without config.json": (["run", "--model", "{tmp}/emptydir"], ["no config.json"]),
    "model dir empty": (["run", "--model", "{tmp}/emptydir"],
                        ["not a Hugging Face checkpoint", "no config.json and no weights", "it is empty"]),
    "model dir with config.json only": (["run", "--model", "{tmp}/configonly"],
                                        ["no weights (*.safetensors", "it holds config.json, notes.md"]),
    "model dir of other files": (["run", "--model", "{tmp}/notamodel"],
                                 ["no config.json and no weights", "it holds data/, readme.txt"]),
    "model empty dir in a config file": (["run", "--config", "{tmp}/empty_model.yaml"],
                                         ["no config.json and no weights", "it is empty"]),
    "preflight model empty dir": (["preflight", "--model", "{tmp}/emptydir"], ["it is empty"]),
    "sweep model empty dir": (["sweep", "rho", "--set", "model.path={tmp}/emptydir"],
                              ["cannot start", "no config.json and no weights", "it is empty"]),
    # ---- resume
    "resume with a changed option": (["run", "--resume", "existing", "--lr", "0.1"],
                                     ["--resume 'existing'", "--lr cannot be changed"]),
    "resume unknown run": (["run", "--resume", "ghost"], ["no run 'ghost'"]),
    "resume steps that do not extend": (["run", "--resume", "existing", "--steps", "3"],
                                        ["--steps 3 does not extend its 20 steps"]),
    # ---- registries and sweeps
    "sweep width 0": (["sweep", "rho", "--width", "0"], ["--width 0", "1..64"]),
    "sweep width negative": (["sweep", "rho", "--width", "-2"], ["--width -2"]),
    "sweep width 1000": (["sweep", "rho", "--width", "1000"], ["--width 1000", "1..64"]),
    "sweep seed -1": (["sweep", "rho", "--seeds", "-1"], ["seed -1 is outside 0..4294967295"]),
    "sweep seeds not integers": (["sweep", "rho", "--seeds", "a,b"], ["--seeds", "'a,b'"]),
    "sweep empty grid axis": (["sweep", "rho", "--grid", "filter.rho=[]"], ["filter.rho", "non-empty"]),
    "sweep registry empty axis": (["sweep", "empty", "--registry", "{tmp}/empty_axis.yaml"],
                                  ["'empty'", "grid axis 'filter.rho' has no values"]),
    "sweep registry no seeds": (["sweep", "noseeds", "--registry", "{tmp}/no_seeds.yaml"],
                                ["seeds is empty"]),
    "sweep registry not UTF-8": (["sweep", "rho", "--registry", "{tmp}/latin1.yaml"], ["registry", "not UTF-8"]),
    "sweep registry missing": (["sweep", "rho", "--registry", "{tmp}/nope.yaml"], ["does not exist"]),
    "sweep db is a directory": (["sweep", "rho", "--db", "{tmp}"], ["--db", "is a directory"]),
    "serve width 0": (["serve", "--width", "0"], ["--width 0", "1..64"]),
    "experiments registry empty axis": (["experiments", "--registry", "{tmp}/empty_axis.yaml"],
                                        ["grid axis 'filter.rho' has no values"]),
    "preflight seed -1": (["preflight", "--seed", "-1"], ["seed", "got -1"]),
    "preflight config not UTF-8": (["preflight", "--config", "{tmp}/latin1.yaml"], ["not UTF-8"]),
}


def _write_inputs(tmp: Path) -> None:
    files = {
        "penalty_nan.yaml": "env:\n  format_penalty: .nan\n",
        "penalty_inf.yaml": "env:\n  format_penalty: .inf\n",
        "temperature_inf.yaml": "rollout:\n  temperature: .inf\n",
        "grad_nan.yaml": "algorithm:\n  max_grad_norm: .nan\n",
        "val_seed.yaml": "validation:\n  seed: -5\n",
        "tokens.yaml": "rollout:\n  max_new_tokens: 1000000\n",
        "list.yaml": "- steps\n- 3\n",
        "notes.txt": "not a database, only some text that is long enough\n",
        "empty.duckdb": "",
    }
    for name, text in files.items():
        (tmp / name).write_text(text)
    (tmp / "latin1.yaml").write_bytes(NOT_UTF8)
    (tmp / "emptydir").mkdir()
    (tmp / "configonly").mkdir()
    (tmp / "configonly" / "config.json").write_text('{"model_type": "qwen2"}')
    (tmp / "configonly" / "notes.md").write_text("no weights here")
    (tmp / "notamodel" / "data").mkdir(parents=True)
    (tmp / "notamodel" / "readme.txt").write_text("hello")
    (tmp / "empty_model.yaml").write_text(yaml.safe_dump({"model": {"path": str(tmp / "emptydir")}}))
    (tmp / "empty_axis.yaml").write_text(yaml.safe_dump({"experiments": {"empty": {
        "grid": {"filter.rho": []}}}}))
    (tmp / "no_seeds.yaml").write_text(yaml.safe_dump({"experiments": {"noseeds": {"seeds": []}}}))


def digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the sha256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_list_holds_at_least_forty_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_in_one_line_with_the_store_byte_identical(case, populated_store, tmp_path,
                                                                        monkeypatch):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    _write_inputs(inputs)
    monkeypatch.chdir(tmp_path)  # a relative --model resolves here
    args, fragments = CASES[case]
    argv = [a.format(tmp=inputs, db=populated_store) for a in args]
    if argv[0] in ("run", "sweep") and "--db" not in argv:
        argv += ["--db", str(populated_store)]
    before = digest(populated_store.parent), digest(inputs)
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert (digest(populated_store.parent), digest(inputs)) == before
    assert not Path("/proc/mirage-test").exists()

"""The GPU install is opt-in: the default install (what `bash scripts/install.sh` and CI run)
never pulls vLLM or a CUDA torch, and the `gpu` extra, constraints-gpu.txt and the CPU pins
agree with each other (docs/gpu.md)."""

from __future__ import annotations

import os
import stat
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]


def constraints(name: str) -> dict[str, Requirement]:
    lines = (REPO / name).read_text().splitlines()
    found = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    return {canonicalize_name(r.name): r for r in found}


def requirements_of(extras: list[str]) -> list[Requirement]:
    """The requirements that installing ``mirage-rl[extras]`` pulls from this project,
    following the extras that name the project itself (``mirage-rl[wandb,...]``)."""
    found, seen, todo = [Requirement(r) for r in PROJECT["dependencies"]], set(), list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in map(Requirement, EXTRAS[extra]):
            if canonicalize_name(requirement.name) == canonicalize_name(PROJECT["name"]):
                todo.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


CPU = constraints("constraints.txt")
GPU = constraints("constraints-gpu.txt")


def test_the_default_install_pulls_no_vllm():
    names = {canonicalize_name(r.name) for r in requirements_of(["test"])}
    assert "vllm" not in names
    assert "torch" in names and "verl" in names  # the walk does see the project's own pins


def test_the_gpu_extra_and_its_alias_pull_vllm():
    for extra in ("gpu", "vllm"):
        assert "vllm" in {canonicalize_name(r.name) for r in requirements_of([extra])}


def test_the_gpu_extras_pins_are_the_constraints_files():
    for requirement in map(Requirement, EXTRAS["gpu"]):
        pinned = GPU[canonicalize_name(requirement.name)]
        assert requirement.specifier == pinned.specifier, requirement.name


def test_both_constraint_files_pin_the_same_torch_and_verl():
    for name in ("torch", "verl"):
        cpu_pins = {s.version for s in CPU[name].specifier if s.operator == "=="}
        gpu_pins = {s.version for s in GPU[name].specifier if s.operator == "=="}
        assert cpu_pins == gpu_pins and len(cpu_pins) == 1, name


def test_the_gpu_constraints_refuse_the_cpu_build_of_torch():
    (version,) = (s.version for s in GPU["torch"].specifier if s.operator == "==")
    assert not GPU["torch"].specifier.contains(f"{version}+cpu")
    assert GPU["torch"].specifier.contains(version)
    assert CPU["torch"].specifier.contains(f"{version}+cpu")


def test_the_gpu_pins_satisfy_the_projects_own_ranges():
    declared = {canonicalize_name(r.name): r for r in map(Requirement, PROJECT["dependencies"])}
    for name, requirement in GPU.items():
        if name in declared:
            (version,) = (s.version for s in requirement.specifier if s.operator == "==")
            assert declared[name].specifier.contains(version), f"{name} {version} vs {declared[name]}"
    assert set(GPU) >= {"torch", "vllm", "transformers", "verl", "prefect"}


@pytest.fixture
def fake_checkout(tmp_path: Path) -> Path:
    """A copy of scripts/install.sh whose .venv/bin/python records its arguments."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "install.sh", tmp_path / "scripts" / "install.sh")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "$*" >> "$(dirname "$0")/calls"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def install(checkout: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    done = subprocess.run(["bash", str(checkout / "scripts" / "install.sh"), *args],
                          capture_output=True, text=True, timeout=60, env=os.environ | {"PYTHON": "false"})
    calls = checkout / ".venv" / "bin" / "calls"
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_install_sh_without_options_runs_the_cpu_install(fake_checkout: Path):
    """pip installs without compiling, then the installed packages' directory is looked up
    (and compiled on every core; the fake python prints no directory, so that is skipped)."""
    done, calls = install(fake_checkout)
    assert done.returncode == 0, done.stderr
    assert calls == ["-m pip install -q --upgrade pip",
                     "-m pip install -q --no-compile -c constraints.txt -e .[test] -e examples/mirage-example-filter "
                     "-e examples/mirage-example-env",
                     '-c import sysconfig; print(sysconfig.get_paths()["purelib"])']


def test_install_sh_gpu_adds_the_gpu_extra_under_the_gpu_constraints(fake_checkout: Path):
    done, calls = install(fake_checkout, "--gpu")
    assert done.returncode == 0, done.stderr
    assert calls[1] == ("-m pip install -q --no-compile -c constraints-gpu.txt -e .[test,gpu] "
                        "-e examples/mirage-example-filter -e examples/mirage-example-env")


def test_install_sh_compiles_the_installed_packages_on_every_core(fake_checkout: Path):
    python = fake_checkout / ".venv" / "bin" / "python"  # this one names a directory when asked
    python.write_text('#!/bin/sh\necho "$*" >> "$(dirname "$0")/calls"\n'
                      'case "$1" in -c) echo /site-packages ;; esac\n')
    done, calls = install(fake_checkout)
    assert done.returncode == 0, done.stderr
    assert calls[-1] == "-m compileall -q -j 0 /site-packages"


@pytest.mark.parametrize("args", [["--cuda"], ["--gpu", "--gpu"], ["--test", "--test"]])
def test_install_sh_refuses_other_arguments_before_installing(fake_checkout: Path, args: list[str]):
    done, calls = install(fake_checkout, *args)
    assert done.returncode == 2 and calls == []
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "--gpu" in line and "--test" in line


def fake_tools(checkout: Path, *, chromium: bool) -> dict[str, str]:
    """A PATH of only what install.sh calls (the real shell tools, an apt-get that records
    its arguments), with or without a chromium on it."""
    tools = checkout / "tools"
    tools.mkdir()
    for tool in ("sh", "dirname", "id", "cat", "rm", "tail"):
        (tools / tool).symlink_to(shutil.which(tool))
    apt = tools / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$*" >> {checkout}/apt-calls\n')
    apt.chmod(0o755)
    if chromium:
        add_chromium(checkout)
    return {"PATH": str(tools)}


def add_chromium(checkout: Path) -> None:
    (checkout / "tools" / "chromium").write_text("#!/bin/sh\n")
    (checkout / "tools" / "chromium").chmod(0o755)


def install_with(checkout: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("bash"), str(checkout / "scripts" / "install.sh"), *args], capture_output=True,
                          text=True, timeout=60, env=os.environ | {"PYTHON": "false"} | env)


@pytest.mark.skipif(os.geteuid() != 0, reason="installing chromium is root's (or sudo's) job")
def test_install_sh_test_installs_chromium_where_it_is_missing(fake_checkout: Path):
    done = install_with(fake_checkout, fake_tools(fake_checkout, chromium=False), "--test")
    assert done.returncode == 0, done.stderr
    apt = (fake_checkout / "apt-calls").read_text().splitlines()
    assert apt[0].startswith("update") and apt[1].split()[-1] == "chromium"
    calls = (fake_checkout / ".venv" / "bin" / "calls").read_text().splitlines()
    assert calls[1].startswith("-m pip install -q --no-compile -c constraints.txt -e .[test]")


def test_install_sh_leaves_the_browser_out_of_the_plain_install_and_keeps_a_present_one(fake_checkout: Path):
    done = install_with(fake_checkout, fake_tools(fake_checkout, chromium=False))
    assert done.returncode == 0, done.stderr
    assert not (fake_checkout / "apt-calls").exists()  # the main job needs no browser
    add_chromium(fake_checkout)
    done = install_with(fake_checkout, {"PATH": str(fake_checkout / "tools")}, "--test")
    assert done.returncode == 0, done.stderr
    assert not (fake_checkout / "apt-calls").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="installing chromium is root's (or sudo's) job")
def test_install_sh_fails_when_the_chromium_install_beside_pip_fails(fake_checkout: Path):
    """apt-get runs in the background while pip works: its failure still fails the install,
    with apt's own last lines."""
    env = fake_tools(fake_checkout, chromium=False)
    (fake_checkout / "tools" / "apt-get").write_text('#!/bin/sh\necho "E: Unable to locate package chromium"\nexit 100\n')
    done = install_with(fake_checkout, env, "--test")
    assert done.returncode == 1
    assert "E: Unable to locate package chromium" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: installing Debian's chromium failed")

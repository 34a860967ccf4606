"""Every code block in README.md and docs/*.md is checked, so an example can never use
undefined names or options that do not exist.

* ``python`` blocks run, page by page in one namespace each (a page reads top to bottom
  like a notebook: a later block may use what an earlier one defined), in a scratch
  directory holding a small store at ``runs/mirage.duckdb``.
* ``bash`` blocks run with ``bash -e`` in that directory, where ``.venv/bin/core`` and
  ``core`` are this checkout's command line, unless the line before the block is
  ``<!-- not run: REASON -->`` (a server, an install, a run of many minutes).
* ``toml`` and ``yaml`` blocks parse; ``text`` blocks (output, file trees) are shown as
  they are. A block without one of these languages is refused.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt

from mirage.core.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python", "bash", "toml", "yaml", "text"}
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>\S.*?) -->$")


@dataclass
class Block:
    page: Path
    line: int
    language: str
    code: str
    not_run: str | None  # the reason given by a <!-- not run: ... --> marker

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    tokens = MarkdownIt().parse(page.read_text())
    found = []
    for index, token in enumerate(tokens):
        if token.type == "code_block":
            raise AssertionError(f"{page.name}:{token.map[0] + 1}: indented code block; fence it")
        if token.type != "fence":
            continue
        before = tokens[index - 1] if index else None
        marker = NOT_RUN.match(before.content.strip()) if before is not None and before.type == "html_block" else None
        found.append(Block(page, token.map[0] + 1, token.info.strip(), token.content,
                           marker["reason"] if marker else None))
    return found


ALL = [block for page in PAGES for block in blocks(page)]


def by_language(language: str) -> list[Block]:
    return [block for block in ALL if block.language == language]


@pytest.fixture
def scratch(tmp_path: Path, populated_store: Path) -> Path:
    """A directory with a store at runs/mirage.duckdb and ``core`` on the path."""
    (tmp_path / "runs").mkdir()
    store = tmp_path / "runs" / "mirage.duckdb"
    populated_store.rename(store)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    core = bin_dir / "core"
    core.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mirage "$@"\n')
    core.chmod(core.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def test_every_block_has_a_known_language():
    unknown = [f"{b.where} ({b.language or 'none'})" for b in ALL if b.language not in LANGUAGES]
    assert not unknown, f"label each block with one of {sorted(LANGUAGES)}: {unknown}"


def test_only_bash_blocks_may_be_marked_not_run():
    assert not [b.where for b in ALL if b.not_run and b.language != "bash"]


def test_the_checks_find_the_guides_examples():
    pages = {b.page.name for b in by_language("python")}
    assert {"writing-a-filter.md", "writing-an-environment.md", "writing-a-backend.md",
            "writing-a-diagnostic.md", "README.md"} <= pages
    assert any(b.not_run is None for b in by_language("bash"))


@pytest.mark.parametrize("page", sorted({b.page for b in by_language("python")}), ids=lambda p: p.name)
def test_python_blocks_run(page: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(scratch)
    namespace: dict = {"__name__": f"doc_example_{page.stem.replace('-', '_')}"}
    for block in (b for b in by_language("python") if b.page == page):
        try:
            exec(compile(block.code, block.where, "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"{block.where}: {type(error).__name__}: {error}") from error


@pytest.mark.slow  # each block runs core commands: 5-12 s a block
@pytest.mark.plugin_autoload
@pytest.mark.parametrize("block", [b for b in by_language("bash") if b.not_run is None], ids=lambda b: b.where)
def test_bash_blocks_run(block: Block, scratch: Path):
    env = os.environ | {"PATH": f"{scratch / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-e", "-c", block.code], cwd=scratch, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("block", by_language("toml"), ids=lambda b: b.where)
def test_toml_blocks_parse(block: Block):
    tomllib.loads(block.code)


@pytest.mark.parametrize("block", by_language("yaml"), ids=lambda b: b.where)
def test_yaml_blocks_parse(block: Block):
    assert yaml.safe_load(block.code) is not None

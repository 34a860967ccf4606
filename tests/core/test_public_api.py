"""The plugin API is frozen (issue #47): ``mirage.plugin``'s surface (names, base-class
signatures, data-type fields, hook specifications) equals the committed snapshot, so a
breaking change is a visible decision (tests/core/public_api.py says how to update it);
the docs and examples import only the public modules; ``core --version`` prints both
versions; the version check sets aside a plugin written for an API this MIRAGE does not
read; every old path resolves to today's objects with a deprecation warning."""

from __future__ import annotations

import difflib
import importlib
import json
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
from public_api import SNAPSHOT, render, snapshot

from mirage.core.plugin_api.manager import build_plugins
from mirage.moved_paths import MOVED, OLD_PACKAGE_NAMES, MirageDeprecationWarning
from mirage.core.plugin_api.version import API_VERSION, READS

REPO = Path(__file__).resolve().parents[2]


def test_the_public_surface_equals_its_snapshot():
    now, frozen = render(snapshot()), SNAPSHOT.read_text()
    diff = "".join(difflib.unified_diff(frozen.splitlines(True), now.splitlines(True), "snapshot", "now", n=2))
    assert now == frozen, (
        "the public plugin API changed. If that is deliberate: run `.venv/bin/python "
        "tests/core/public_api.py --update`, bump API_VERSION and add a CHANGELOG.md line, in "
        "the same commit.\n" + diff)


def test_the_snapshot_sees_a_renamed_field(monkeypatch):
    """What the check above catches: a data type's field renamed."""
    import dataclasses

    from mirage.plugin import Selection

    renamed = dataclasses.make_dataclass("Selection", [("kept", list), ("kept_samples", dict),
                                                       ("metrics", dict)])
    renamed.__module__ = Selection.__module__
    monkeypatch.setattr("mirage.plugin.Selection", renamed)
    changed = json.loads(render(snapshot()))["modules"]["mirage.plugin"]["Selection"]["fields"]
    assert changed != json.loads(SNAPSHOT.read_text())["modules"]["mirage.plugin"]["Selection"]["fields"]


def test_the_snapshot_records_the_api_version_and_every_hook():
    frozen = json.loads(SNAPSHOT.read_text())
    assert frozen["api_version"] == API_VERSION == READS[-1]
    from mirage.core.plugin_api import hookspecs

    hooks = {name for name in vars(hookspecs) if name.startswith("mirage_")}
    assert set(frozen["hookspecs"]) == hooks and frozen["hookspecs"]["mirage_filter"]["options"] == {"firstresult": True}


PUBLIC_IMPORT = re.compile(r"^\s*(?:from|import)\s+(mirage(?:\.[\w.]*)?)\b(?!_)", re.M)
ALLOWED = ("mirage.plugin", "mirage.plugin.testing", "mirage.integrations.trl")


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def imports_in_docs_and_examples() -> list[tuple[str, str]]:
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in code_blocks(path.read_text()):
            found += [(str(path.relative_to(REPO)), module) for module in PUBLIC_IMPORT.findall(block)]
    for path in sorted((REPO / "examples").rglob("*.py")):
        found += [(str(path.relative_to(REPO)), module) for module in PUBLIC_IMPORT.findall(path.read_text())]
    return found


def test_docs_and_examples_import_only_the_public_modules():
    found = imports_in_docs_and_examples()
    assert len({path for path, _ in found}) >= 8  # the guides and both examples are read
    deep = [f"{path}: {module}" for path, module in found if module not in ALLOWED]
    assert not deep, "import from mirage.plugin (or mirage.plugin.testing) instead:\n" + "\n".join(deep)


def test_the_docs_check_sees_a_deep_import():
    block = "```python\nfrom mirage.core.rl.batch import Batch\nfrom mirage.plugin import Filter\n```"
    modules = [m for b in code_blocks(block) for m in PUBLIC_IMPORT.findall(b)]
    assert [m for m in modules if m not in ALLOWED] == ["mirage.core.rl.batch"]


def test_core_version_prints_both_versions(cli):
    for args in (["--version"],):
        code, out, err = cli(*args)
        assert code == 0, err
        lines = out.strip().splitlines()
        assert re.fullmatch(r"mirage-rl \d+\.\d+\.\d+", lines[0])
        assert lines[1].startswith(f"plugin API {API_VERSION} ")


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_flat_path_is_todays_module_with_a_warning(old):
    sys.modules.pop(old, None)
    with pytest.warns(MirageDeprecationWarning, match=re.escape(old) + ".*mirage.plugin"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])


@pytest.mark.parametrize("package,name", [(p, n) for p, names in OLD_PACKAGE_NAMES.items() for n in names])
def test_the_old_names_of_the_flat_config_and_store_modules(package, name):
    with pytest.warns(MirageDeprecationWarning, match=re.escape(f"{package}.{name}")):
        value = getattr(importlib.import_module(package), name)
    assert value is getattr(importlib.import_module(OLD_PACKAGE_NAMES[package][name]), name)


def plugin_declaring(api: object) -> ModuleType:
    from mirage.plugin import Filter, Selection, hookimpl

    class KeepAll(Filter):
        def select(self, batch):
            return Selection(list(range(len(batch.groups))))

    module = ModuleType("declares")
    module.MIRAGE_PLUGIN_API = api

    @hookimpl
    def mirage_register_filters(register):
        register("keep_all_declared", KeepAll)

    module.mirage_register_filters = mirage_register_filters
    return module


@pytest.mark.parametrize("api,generation", [(">=2.1,<3", 2), ("~=2.0", 2), ("<2", 1), (">=1", 2)])
def test_a_declared_api_that_this_mirage_reads_loads(api, generation):
    plugins = build_plugins(extra=[("declares", plugin_declaring(api))])
    assert plugins.failed == [] and plugins.info("declares").api == generation
    assert plugins.info("declares").deprecated is None or generation == 1


@pytest.mark.parametrize("api", [">=3", "==2.6", "not a version"])
def test_a_plugin_for_an_api_this_mirage_does_not_read_is_set_aside_saying_which(api):
    plugins = build_plugins(extra=[("declares", plugin_declaring(api))])
    (failure,) = plugins.failed
    assert "keep_all_declared" not in plugins.registries.filters
    line = failure.line()
    assert "'declares'" in line and "set aside" in line
    if api != "not a version":
        assert f"needs plugin API {api}" in line and f"plugin API {API_VERSION}" in line
    else:
        assert "not a version specifier" in line


def test_a_public_only_plugin_gets_no_notice():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plugins = build_plugins(extra=[("declares", plugin_declaring(">=2.1"))])
    assert plugins.info("declares").deprecated is None
    assert not [w for w in caught if issubclass(w.category, MirageDeprecationWarning)]

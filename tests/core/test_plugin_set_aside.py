"""A third-party plugin that breaks the contract is set aside, not fatal: installed beside
the built-ins, a duck-typed filter package (written against an earlier release's guide:
no ``Filter`` base class) is listed as failed with the reason, a run that asks for its
filter fails in one line, every other command and run works and runs record it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mirage.core.store.run_store import RunStore

DUCK_MODULE = '''
"""A filter written from the earlier guides: duck-typed, no Filter base class."""
from mirage.core.plugin_api.hookspecs import hookimpl


class KeepAll:
    def __init__(self, config):
        self.config = config

    def select(self, batch):
        return None


@hookimpl
def mirage_register_filters(register):
    register("duck_keep_all", KeepAll)
'''


@pytest.fixture
def duck_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``mirage-ducktyped`` 0.1.0 installed (a module and its dist-info with an entry
    point in the ``mirage`` group) in a folder on the subprocesses' PYTHONPATH."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "mirage_ducktyped.py").write_text(textwrap.dedent(DUCK_MODULE))
    info = site / "mirage_ducktyped-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mirage-ducktyped\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[mirage]\nducktyped = mirage_ducktyped\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


def no_traceback(*texts: str) -> bool:
    return not any("Traceback" in text for text in texts)


@pytest.mark.plugin_autoload
def test_plugins_lists_it_as_failed_with_the_reason(cli, duck_installed):
    code, out, err = cli("plugins")
    assert code == 0, err
    assert "ducktyped (FAILED: set aside, none of its components or hooks are used)" in out
    line = [text for text in out.splitlines() if "plugin 'ducktyped'" in text][0].strip()
    assert line.startswith("plugin 'ducktyped' (mirage-ducktyped 0.1.0, ")
    assert f"{duck_installed / 'mirage_ducktyped.py'}:6" in line  # where KeepAll is defined
    assert "filters: 'duck_keep_all' (by ducktyped) must subclass mirage.core.plugin_api.components.Filter" in line
    assert "leave it out with MIRAGE_PLUGINS=" in line and "`pip uninstall mirage-ducktyped`" in line
    assert "duck_keep_all" not in out.split("ducktyped (FAILED")[0]  # registered by nobody
    assert err.count("warning: plugin 'ducktyped'") == 1  # said once
    assert no_traceback(out, err)


@pytest.mark.plugin_autoload
def test_a_run_asking_for_its_filter_fails_in_one_line(cli, duck_installed, tiny_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--filter", "duck_keep_all")
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: filter 'duck_keep_all' is not available: plugin 'ducktyped' "
                      f"(mirage-ducktyped 0.1.0, {duck_installed / 'mirage_ducktyped.py'}:6) was set "
                      "aside: filters: 'duck_keep_all' (by ducktyped) must subclass "
                      "mirage.core.plugin_api.components.Filter; got <class 'mirage_ducktyped.KeepAll'>; fix it, "
                      "or leave it out with MIRAGE_PLUGINS=example_env,example_filter or "
                      "`pip uninstall mirage-ducktyped`"]
    assert not db.exists()  # refused before any work
    assert no_traceback(out, err)


@pytest.mark.plugin_autoload
def test_runs_that_do_not_use_it_work_and_record_it(cli, duck_installed, tiny_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--filter", "top_p",
                         "--steps", "1", "--quiet")
    assert code == 0, err
    (run,) = RunStore(db).list_runs()
    assert [p["name"] for p in run["plugins"] if p["name"] == "ducktyped"] == []
    (event,) = [e for e in RunStore(db).events(run["run_id"]) if e["kind"] == "plugin_set_aside"]
    assert event["message"].startswith("plugin 'ducktyped' (mirage-ducktyped 0.1.0, ")
    for command in (["--help"], ["experiments"], ["runs", "--db", str(db)]):
        code, out, err = cli(*command)
        assert code == 0 and no_traceback(out, err), (command, err)


BROKEN_AT_IMPORT = '''
from mirage.core.plugin_api.hookspecs import hookimpl

raise RuntimeError("this plugin needs a library that is not installed")
'''


@pytest.mark.plugin_autoload
def test_a_plugin_that_fails_to_import_is_set_aside_too(cli, duck_installed):
    (duck_installed / "mirage_ducktyped.py").write_text(BROKEN_AT_IMPORT)
    code, out, err = cli("plugins")
    assert code == 0 and no_traceback(out, err)
    assert (f"plugin 'ducktyped' (mirage-ducktyped 0.1.0, {duck_installed / 'mirage_ducktyped.py'}:4) "
            "was set aside: loading it raised RuntimeError: this plugin needs a library that is not "
            "installed") in out


def test_a_plugin_keeps_none_of_its_components_when_one_is_refused_or_a_hook_raises():
    """All or nothing per plugin: its good filter is not registered either, whether the
    bad part is a refused component or another registration hook that raises."""
    from mirage.core.plugin_api.components import Filter
    from mirage.core.plugin_api.hookspecs import hookimpl
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.plugin_api.registry import SetAsideComponentError

    class Good(Filter):
        def select(self, batch): ...

    class Refused:
        @hookimpl
        def mirage_register_filters(self, register):
            register("half_good", Good)
            register("half_bad", object)

    class Raises:
        @hookimpl
        def mirage_register_filters(self, register):
            register("half_good", Good)

        @hookimpl
        def mirage_register_loggers(self, register):
            raise RuntimeError("no tracker library")

    for plugin, rule in ((Refused(), "filters: 'half_bad' (by half) must subclass"),
                         (Raises(), "mirage_register_loggers raised RuntimeError: no tracker library")):
        loaded = build_plugins(extra=[("half", plugin)])
        (failure,) = loaded.failed
        assert rule in failure.rule
        assert "half_good" not in loaded.registries.filters
        assert "half" not in [info.name for info in loaded.infos]
        assert "half" not in [p["name"] for p in loaded.records()]  # what a run records
        assert not loaded.manager.has_plugin("half")  # none of its hooks run
        with pytest.raises(SetAsideComponentError, match="filter 'half_good' is not available: plugin 'half'"):
            loaded.registries.filters.get("half_good")

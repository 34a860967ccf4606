"""The real entry-point path: examples/mirage-example-filter is installed in the test venv."""

from pathlib import Path

import pytest

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore


@pytest.mark.plugin_autoload
def test_installed_package_registers_its_filter():
    plugins = build_plugins()
    info = plugins.info("example_filter")
    assert (info.version, info.builtin) == ("0.1.0", False)
    assert info.components == {"filters": ["best_half"]}
    assert plugins.registries.filters.owner("best_half") == "example_filter"


@pytest.mark.plugin_autoload
def test_allowlist_and_kill_switch_exclude_it(monkeypatch):
    monkeypatch.setenv("MIRAGE_PLUGINS", "some_other_plugin")
    assert "best_half" not in build_plugins().registries.filters
    monkeypatch.delenv("MIRAGE_PLUGINS")
    monkeypatch.setenv("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert "best_half" not in build_plugins().registries.filters
    monkeypatch.setenv("MIRAGE_PLUGINS", "example_filter")
    monkeypatch.setenv("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", "0")
    assert "best_half" in build_plugins().registries.filters


@pytest.mark.slow
@pytest.mark.plugin_autoload
def test_run_with_third_party_filter_records_the_plugin(tiny_config, tmp_path: Path):
    data = tiny_config()
    data["filter"] = {"name": "best_half"}
    data["steps"] = 2
    db = tmp_path / "runs.duckdb"
    run_id = execute(build_config(data), db, progress=False)
    row = RunStore(db).get_run(run_id)
    assert row["status"] == "finished"
    assert {"name": "example_filter", "version": "0.1.0"} in row["plugins"]
    kept = [g["kept"] for g in RunStore(db).groups(run_id, step=1)]
    assert sum(kept) == 1 and len(kept) == 2  # ceil(2 / 2) of P = 2 groups

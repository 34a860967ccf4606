"""End to end: ``core app`` serves the store of three real runs on a free port and headless
Chromium renders it; the screenshot and the DOM are kept as test artifacts."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from browser import browser, chromium, load_twice, rendered_charts, script_idle, serve

from mirage.core.store import RunStore

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# Where the screenshot is kept after the test (CI may upload the folder).
ARTIFACTS = Path(os.environ.get("MIRAGE_TEST_ARTIFACTS", REPO / "test-artifacts"))
MISSING = "Debian's chromium is missing: .ci/run installs it (apt-get install -y chromium)"


def run_line(run_id: str, status: str, step: str) -> re.Pattern:
    """The run list's line for one run, as Streamlit renders it."""
    return re.compile(rf"<code[^>]*>{run_id}</code>\s*{status}, step {step}")


def test_app_renders_the_runs_and_charts_in_chromium(app_store, tmp_path):
    assert chromium(), MISSING
    db, ids = app_store
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with serve(db, tmp_path / "app.log") as url, browser() as page:
        try:
            dom = load_twice(page, url, charts=5)
            dom = page.wait_for("an idle script", script_idle, 60)
        finally:
            page.screenshot(ARTIFACTS / "app-e2e.png")
            (ARTIFACTS / "app-e2e.html").write_text(page.dom())

    assert (ARTIFACTS / "app-e2e.png").stat().st_size > 20_000  # a drawn page, not a blank one
    assert "MIRAGE runs" in dom and 'data-testid="stException"' not in dom
    for run_id in ids.values():  # the run list names every selected run
        assert run_line(run_id, "finished", "4/4").search(dom), run_id
    # the first tab's five charts, drawn by Vega as SVG with their titles
    assert rendered_charts(dom) >= 5
    for title in ("Validation success", "Retrieval accuracy vs chance", "Entropy"):
        assert re.search(rf"<text[^>]*>{re.escape(title)}</text>", dom), title


def test_a_running_run_refreshes_in_the_open_page(app_store, tmp_path):
    """The run writes a step while the page is open: the page shows it without a reload."""
    assert chromium(), MISSING
    db, ids = app_store
    live = tmp_path / "live.duckdb"
    shutil.copy(db, live)
    store = RunStore(live)
    run_id = ids["diag"]
    store.set_status(run_id, "running")
    with serve(live, tmp_path / "app.log") as url, browser() as page:
        dom = load_twice(page, url, charts=5)
        assert "re-read the store every 5 s" in dom
        assert run_line(run_id, "running", "4/4").search(dom)
        store.record_step(run_id, 5, {"val/success": 0.5})  # the app's reads never block this
        page.wait_for("step 5", lambda d: bool(run_line(run_id, "running", "5/4").search(d)), 60)

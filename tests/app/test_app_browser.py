"""End to end: ``core app`` serves the store of three real runs on a free port and headless
Chromium renders it; the screenshot and the DOM are kept as test artifacts."""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
import shutil
from pathlib import Path

import pytest
from bench_store import LIFT, SEEDS, lake
from browser import browser, chromium, load_twice, rendered_charts, script_idle, serve

from mirage.app.colours import PALETTE
from mirage.core.store.heartbeat import this_process
from mirage.core.store.run_store import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("busy")]  # busy processes: one such test at a time

REPO = Path(__file__).resolve().parents[2]
# Where the screenshot is kept after the test (CI may upload the folder).
ARTIFACTS = Path(os.environ.get("MIRAGE_TEST_ARTIFACTS", REPO / "test-artifacts"))
MISSING = "Debian's chromium is missing: .ci/run installs it (apt-get install -y chromium)"


def run_line(run_id: str, status: str, step: str) -> re.Pattern:
    """The run table's row for one run (cells run, status, progress), as Streamlit
    renders it."""
    cell = r"<t[dh][^>]*>(?:<[^>]+>)*\s*"
    return re.compile(rf"{cell}{run_id}\s*(?:</[^>]+>)*{cell}{status}\s*(?:</[^>]+>)*"
                      rf"{cell}step {step}\s*<")


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
    # this process plays the run's: alive, so the run reads running, not crashed
    store.update_run(run_id, **this_process(), heartbeat_at=datetime.now(timezone.utc))
    with serve(live, tmp_path / "app.log") as url, browser() as page:
        dom = load_twice(page, url, charts=5)
        assert "re-read the store every 5 s" in dom
        # the run list may draw after the charts: wait for it (it failed once reading at once)
        page.wait_for("the running run at step 4", lambda d: bool(run_line(run_id, "running", "4/4").search(d)), 60)
        store.record_step(run_id, 5, {"val/success": 0.5})  # the app's reads never block this
        page.wait_for("step 5", lambda d: bool(run_line(run_id, "running", "5/4").search(d)), 60)


def drawn_charts(dom: str) -> dict[str, tuple[set[str], set[str]]]:
    """Vega title -> (stroke colours, legend-like texts) of each chart drawn in the page."""
    found = {}
    for chart in dom.split('data-testid="stVegaLiteChart"')[1:]:
        title = re.search(r'role-title-text.*?<text[^>]*>([^<]*)</text>', chart)
        if title:
            found[title.group(1)] = (set(re.findall(r'stroke="(#[0-9a-f]{6})"', chart)),
                                     set(re.findall(r"<text[^>]*>([^<]*)</text>", chart)))
    return found


def test_grouped_bands_and_stable_colours_in_chromium(bench_store, tmp_path):
    """A linked explorer view (metrics and grouping in the URL) draws one mean line and
    band per filter in the group colours; each run keeps its table colour on the
    training-dynamics chart; narrowing the picker through the URL selects the matching
    runs."""
    assert chromium(), MISSING
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    query = "?group=filter.name&metrics=train/success,val/success"
    runs = [lake(f, s) for f in reversed(LIFT) for s in reversed(SEEDS)]  # newest first
    with serve(bench_store.path, tmp_path / "app.log") as url, browser() as page:
        try:
            dom = load_twice(page, url + query, charts=1)
            first_tab = drawn_charts(page.wait_for("an idle script", script_idle, 60))
            page.click_tab("Metric explorer")
            dom = page.wait_for("the grouped charts", lambda d: rendered_charts(d) >= 3, 60)
            charts = drawn_charts(dom)
            page.open(url + "?env=sokoban&filter=none,top_p")
            narrowed = page.wait_for("the sokoban runs", lambda d: bool(
                run_line("a-sokoban-none", "finished", "0/4").search(d)), 60)
        finally:
            page.screenshot(ARTIFACTS / "app-grouped.png")
            (ARTIFACTS / "app-grouped.html").write_text(page.dom())

    groups = {"filter.name=none", "filter.name=top_p"}
    for title in ("train/success by filter.name", "val/success by filter.name"):
        strokes, texts = charts[title]
        assert groups <= texts, texts  # the legend names both groups
        assert set(PALETTE[:2]) <= strokes and not set(PALETTE[2:]) & strokes  # two colours
    strokes, _ = first_tab["Validation success"]
    assert set(PALETTE[:6]) <= strokes  # one colour per run, as in the run table
    for run_id, colour in zip(runs, PALETTE):
        assert re.search(rf"#T_\w+_row{runs.index(run_id)}_col0 {{ color: {colour}", dom), run_id
    assert "Pick one or more runs" not in narrowed
    assert run_line("a-sokoban-top_p", "finished", "0/4").search(narrowed)
    assert not any(run_line(r, "finished", "4/4").search(narrowed) for r in runs)

"""The rollout browser of an image run shows each turn's picture beside its reasoning and
action: under Streamlit's AppTest, and drawn as an ``<img>`` in headless Chromium (the
store: tests/image_store.py, an image run with the environment's real pictures). A text
run's browser draws no picture (tests/app/test_app_views.py reads its tables)."""

from __future__ import annotations

import os
import re
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from app_testing import open_app, rerun
from browser import browser, chromium, load_twice, script_idle, serve
from image_store import RUN_ID, STEPS, turns, write_image_store

from mirage.core.rl.image import Image

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("MIRAGE_TEST_ARTIFACTS", REPO / "test-artifacts"))
MISSING = "Debian's chromium is missing: .ci/run installs it (apt-get install -y chromium)"


@pytest.fixture
def image_store(tmp_path) -> Path:
    db = tmp_path / "images.duckdb"
    write_image_store(db)
    return db


def first_turns(step: int) -> list:
    return [(row, picture) for row, picture in turns(step) if row.turn == 0]


def test_each_turns_picture_is_shown_beside_its_reasoning_and_action(image_store, monkeypatch):
    at = open_app(image_store, monkeypatch)
    assert at.selectbox(key="rollout_run").value == RUN_ID
    tables = [df.value for df in at.dataframe if "reasoning" in df.value.columns]
    assert [t["pictures"].tolist() for t in tables] == [[1, 1], [1, 1]]  # first turns, one picture each
    expected = [row for step in STEPS for row, _ in first_turns(step)]
    pictures = at.get("image")
    assert [p.proto.imgs[0].caption for p in pictures] == [
        f"prompt {row.prompt_index}, sample 0, turn 0" for row in expected]
    assert all(p.proto.imgs[0].url.endswith(".png") for p in pictures)  # drawn as PNG, not re-encoded JPEG
    words = [t.value for t in at.text]
    assert words == [f"reasoning  {row.reasoning}\naction     {row.action}\nreward     0" for row in expected]
    at.toggle(key="rollout_first").set_value(False)  # every turn: two per trajectory
    assert len(rerun(at).get("image")) == sum(len(turns(step)) for step in STEPS)


def test_a_text_run_draws_no_picture(old_store, monkeypatch):
    at = open_app(old_store(7), monkeypatch)  # a tiny text run with stored rollouts
    tables = [df.value for df in at.dataframe if "reasoning" in df.value.columns]
    assert len(tables) == 2 and all("pictures" not in t.columns for t in tables)
    assert len(at.get("image")) == 0


def test_a_store_from_before_schema_7_opens_as_it_is(old_store, monkeypatch):
    """The app never migrates: a schema 6 store's turns read with no pictures."""
    at = open_app(old_store(6), monkeypatch)
    assert len([df for df in at.dataframe if "reasoning" in df.value.columns]) == 2
    assert len(at.get("image")) == 0


@pytest.mark.slow
@pytest.mark.xdist_group("busy")  # busy processes: one such test at a time
def test_the_rollout_view_draws_the_pictures_in_chromium(image_store, tmp_path):
    """The Rollouts tab draws one ``<img>`` per first turn, served as the stored picture's
    very pixels, beside that turn's reasoning; the screenshot is docs/img/app-rollout-image.png."""
    assert chromium(), MISSING
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "app-rollout-image.png"
    image = re.compile(r'<img[^>]*src="([^"]*/media/[^"]+\.png)"')
    with serve(image_store, tmp_path / "app.log") as url, browser((1400, 1900)) as page:
        try:
            load_twice(page, url, charts=1)
            page.wait_for("an idle script", script_idle, 60)
            page.click_tab("Rollouts")
            dom = page.wait_for("the turns' pictures", lambda d: len(image.findall(d)) >= 4, 60)
            served = []
            for source in image.findall(dom):
                with urllib.request.urlopen(urllib.parse.urljoin(url, source), timeout=10) as reply:
                    served.append(Image(reply.read()).array())
        finally:
            page.screenshot(shot)
            (ARTIFACTS / "app-rollout-image.html").write_text(page.dom())

    assert shot.stat().st_size > 20_000 and 'data-testid="stException"' not in dom
    expected = [picture for step in STEPS for _, picture in first_turns(step)]
    assert len(served) == len(expected)
    for pixels, picture in zip(served, expected):
        assert np.array_equal(pixels, picture.array())
    for row, _ in first_turns(STEPS[0]):  # the reasoning is drawn beside its picture
        assert row.reasoning in dom

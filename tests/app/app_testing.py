"""Driving the app with Streamlit's AppTest and reading the data behind its charts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

ENTRY = Path(__file__).resolve().parents[2] / "mirage" / "app" / "main.py"


def open_app(db: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The app on ``db`` after its first run (raises if the script raised)."""
    monkeypatch.setenv("MIRAGE_DB", str(db))
    at = AppTest.from_file(str(ENTRY), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def chart_datasets(at: AppTest) -> dict[str, list[pd.DataFrame]]:
    """Title -> the datasets behind that chart, one frame each."""
    found = {}
    for element in at.get("vega_lite_chart"):
        spec = json.loads(element.proto.spec)
        title = spec.get("title")
        title = title.get("text") if isinstance(title, dict) else title
        assert title not in found, f"two charts titled {title!r}"
        found[title] = [pa.ipc.open_stream(d.data.data).read_pandas()
                        for d in element.proto.datasets]
    return found


def chart_data(at: AppTest) -> dict[str, pd.DataFrame]:
    """Title -> the rows a chart plots (its collapse-alarm rules, which carry a
    ``message`` column, left out: see ``chart_alarms``)."""
    found = {}
    for title, frames in chart_datasets(at).items():
        plotted = [frame for frame in frames if "message" not in frame.columns]
        assert len(plotted) == 1, (title, [list(f.columns) for f in frames])
        found[title] = plotted[0]
    return found


def chart_alarms(at: AppTest) -> dict[str, pd.DataFrame]:
    """Title -> the collapse alarms drawn on that chart (charts without any left out)."""
    return {title: frame for title, frames in chart_datasets(at).items()
            for frame in frames if "message" in frame.columns}


def infos(at: AppTest) -> list[str]:
    return [element.value for element in at.info]

"""The sidebar: narrow the runs by experiment, environment, algorithm, filter, rho, seed or
status, then pick the runs every view compares."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from mirage.app import queries
from mirage.app.colours import Colours, colours_for
from mirage.app.reader import StoreReader
from mirage.core.config.run_config import AppConfig

# runs-table column -> label; a filter shows when its column has two or more values.
FACETS = {
    "experiment": "experiment", "env": "environment", "algorithm": "algorithm",
    "filter": "filter", "rho": "rho", "seed": "seed", "status": "status",
}  # fmt: skip


@dataclass
class Selection:
    """What every view receives: the store, the chosen runs and the names they logged."""

    reader: StoreReader
    runs: pd.DataFrame  # rows of queries.runs for the chosen runs, newest first
    names: frozenset[str]
    settings: AppConfig
    scope: str  # MI scope: first_turn or trajectory

    @property
    def run_ids(self) -> list[str]:
        return self.runs["run_id"].tolist()

    def has(self, name: str) -> bool:
        return name in self.names

    @property
    def labels(self) -> dict[str, str]:
        """run id -> its legend label (id and filter), in selection order."""
        return {run["run_id"]: legend_label(run) for _, run in self.runs.iterrows()}

    @property
    def colours(self) -> Colours:
        """Each selected run's colour, the same on every chart of the page."""
        return colours_for(self.labels.values())

    def labelled(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with a ``run`` column: each run's legend label (id and filter)."""
        return frame.assign(run=frame["run_id"].map(self.labels).fillna(frame["run_id"]))


def _setting(run: pd.Series) -> str:
    return run["filter"] if run["filter"] == "none" else f"{run['filter']} {run['rho']:g}"


def run_label(run: pd.Series) -> str:
    """``RUN_ID · env algo filter rho · seed N · status``."""
    seed = "" if pd.isna(run["seed"]) else f" · seed {int(run['seed'])}"
    return f"{run['run_id']} · {run['env']} {run['algorithm']} {_setting(run)}{seed} · {run['status']}"


def legend_label(run: pd.Series) -> str:
    """``RUN_ID · filter rho``: short enough for a chart legend."""
    return f"{run['run_id']} · {_setting(run)}"


def _facet_options(values: pd.Series) -> list:
    found = values.dropna().unique().tolist()
    return sorted(found, key=lambda v: (isinstance(v, str), v))


def _linked(column: str, options: list) -> list:
    """The facet values the page's query parameters name (``?env=sokoban&filter=none``)."""
    wanted = {text for value in st.query_params.get_all(column) for text in value.split(",")}
    return [option for option in options if str(option) in wanted]


def _how_many(settings: AppConfig) -> int:
    """Runs picked when the filters change: ``?runs=N``, else ``AppConfig.default_runs``."""
    linked = st.query_params.get("runs", "")
    return int(linked) if linked.isdigit() and int(linked) > 0 else settings.default_runs


def pick_runs(all_runs: pd.DataFrame, settings: AppConfig) -> list[str]:
    """Sidebar filters and the run multiselect; returns the chosen run ids.

    Whenever the filters change, the selection becomes the newest matching runs: the
    runs picked before may not match any more, and Streamlit would otherwise keep only
    those that do (often none)."""
    sidebar = st.sidebar
    sidebar.header("Runs")
    candidates = all_runs
    narrowed = {}
    for column, label in FACETS.items():
        options = _facet_options(all_runs[column])
        if len(options) < 2:
            continue
        chosen = sidebar.multiselect(label, options, default=_linked(column, options),
                                     key=f"facet_{column}")
        if chosen:
            candidates = candidates[candidates[column].isin(chosen)]
            narrowed[column] = [str(value) for value in chosen]
    labels = {run["run_id"]: run_label(run) for _, run in candidates.iterrows()}
    if st.session_state.get("runs_narrowed_by") != narrowed or "runs" not in st.session_state:
        st.session_state["runs_narrowed_by"] = narrowed
        st.session_state["runs"] = list(labels)[: _how_many(settings)]
    return sidebar.multiselect(
        f"compare ({len(labels)} of {len(all_runs)} runs match)", list(labels),
        format_func=lambda run_id: labels.get(run_id, run_id), key="runs",
    )


def mi_scope(names: frozenset[str]) -> str:
    """The MI scope the views show (sidebar choice among the scopes the runs logged)."""
    scopes = sorted({name.split("/")[1] for name in names
                     if name.startswith("mi/") and name.count("/") >= 2})
    if len(scopes) < 2:
        return scopes[0] if scopes else "first_turn"
    default = scopes.index("first_turn") if "first_turn" in scopes else 0
    return st.sidebar.selectbox("MI scope", scopes, index=default, key="mi_scope")


def select(reader: StoreReader, run_ids: list[str], settings: AppConfig,
           scope: str) -> Selection:
    """Fresh rows and metric names of the chosen runs (re-read on every refresh)."""
    fresh = queries.runs(reader)
    runs = fresh[fresh["run_id"].isin(run_ids)].reset_index(drop=True)
    names = frozenset(queries.metric_names(reader, run_ids))
    return Selection(reader, runs, names, settings, scope)

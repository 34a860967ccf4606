"""The Streamlit entry script: ``core app [--db PATH]``, or
``streamlit run mirage/app/main.py -- --db PATH``. Without ``--db`` it reads
``$MIRAGE_DB``, else ``runs/mirage.duckdb`` (the store's default)."""

from __future__ import annotations

import argparse
from pathlib import Path

import streamlit as st

from mirage.app import picker, queries
from mirage.app.across_runs import diagnostics_vs_success
from mirage.app.config_diff import config_diff
from mirage.app.dynamics import filter_behaviour, gradient_norms, mi_vs_entropy, training_dynamics
from mirage.app.explorer import metric_explorer
from mirage.app.live_sweeps import any_running, progress_panel, sweep_progress
from mirage.app.paired_effect import paired_effect
from mirage.app.reader import StoreReader
from mirage.app.rewards import reward_distribution
from mirage.app.rollout_browser import rollout_browser
from mirage.app.run_table import run_table
from mirage.app.sweeps import pivot, stochasticity
from mirage.core.config.run_config import AppConfig
from mirage.core.store.run_store import default_db_path

TABS = {
    "Training dynamics": (training_dynamics, mi_vs_entropy),
    "Metric explorer": (metric_explorer,),
    "Across runs": (diagnostics_vs_success,),
    "Filter & gradients": (filter_behaviour, gradient_norms),
    "Sweeps": (sweep_progress, stochasticity, pivot),
    "Paired effect": (paired_effect,),
    "Reward distribution": (reward_distribution,),
    "Rollouts": (rollout_browser,),
    "Config diff": (config_diff,),
}


def db_path() -> Path:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db", type=Path)
    known, _ = parser.parse_known_args()
    return known.db or default_db_path()


def main() -> None:
    st.set_page_config(page_title="MIRAGE runs", layout="wide")
    st.title("MIRAGE runs")
    settings = AppConfig()
    reader = StoreReader(db_path(), lock_timeout=settings.lock_timeout)
    if not reader.exists():
        st.info(f"No run store at `{reader.path}` yet. Start a run with "
                f"`core run --db {reader.path}`, or open another store with `core app --db PATH`.")
        return
    all_runs = queries.runs(reader)
    sweeping = any_running(reader)
    refresh = settings.refresh_seconds
    if all_runs.empty:
        st.info(f"The store `{reader.path}` has no runs yet. Start one with "
                f"`core run --db {reader.path}`; this page shows it as soon as it starts.")
        if sweeping:  # a sweep whose first cell has not ended yet
            st.fragment(run_every=refresh)(progress_panel)(reader)
        return
    run_ids = picker.pick_runs(all_runs, settings)
    if not run_ids:
        st.info("Pick one or more runs in the sidebar.")
        return
    scope = picker.mi_scope(frozenset(queries.metric_names(reader, run_ids)))
    running = all_runs[all_runs["run_id"].isin(run_ids) & (all_runs["status"] == "running")]
    if not running.empty or sweeping:
        st.caption(f"{len(running)} selected run(s) in progress"
                   + (", a sweep running" if sweeping else "")
                   + f": the views re-read the store every {refresh:g} s.")

    @st.fragment(run_every=refresh if not running.empty or sweeping else None)
    def views() -> None:
        sel = picker.select(reader, run_ids, settings, scope)
        run_table(sel)
        for tab, tab_views in zip(st.tabs(list(TABS)), TABS.values()):
            with tab:
                for view in tab_views:
                    view(sel)

    views()


main()

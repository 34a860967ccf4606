"""The selected runs as a table: status, progress, seed, the reasoning regimes each
entered (when any logged MI checks; docs/diagnostics.md) and every config value that
differs between them (so two runs that read alike in the picker can be told apart),
each run id in the colour its lines have on every chart."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from mirage.app import queries
from mirage.app.config_paths import flatten, varying_paths
from mirage.app.picker import Selection

EXPANDED_UP_TO = 12  # runs; a longer table starts folded so the charts stay in view


def _progress(run: pd.Series) -> str:
    if pd.isna(run["last_step"]):
        return "no step yet"
    steps = f"/{int(run['steps'])}" if pd.notna(run["steps"]) else ""
    return f"step {int(run['last_step'])}{steps}"


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def differing(sel: Selection) -> pd.DataFrame:
    """run, status, progress, seed and one column per config path that differs."""
    configs = {row["run_id"]: flatten(json.loads(row["config"]))
               for _, row in queries.configs(sel.reader, sel.run_ids).iterrows()}
    paths = varying_paths(list(configs.values()))
    regimes = queries.regimes(sel.reader, sel.run_ids)
    measured = any(text != "not measured" for text in regimes.values())
    rows = []
    for _, run in sel.runs.iterrows():
        flat = configs.get(run["run_id"], {})
        rows.append({"run": run["run_id"], "status": run["status"], "progress": _progress(run),
                     "seed": "" if pd.isna(run["seed"]) else str(int(run["seed"])),
                     **({"reasoning regime": regimes.get(run["run_id"], "not measured")} if measured else {}),
                     **{path: _text(flat[path]) if path in flat else "(absent)"
                        for path in paths}})
    return pd.DataFrame(rows)


def run_table(sel: Selection) -> None:
    table = differing(sel)
    colours = sel.colours
    labels = sel.labels

    def colour_ids(ids: pd.Series) -> list[str]:
        return [f"color: {colours.colour(labels[run_id])}; font-weight: bold" for run_id in ids]

    with st.expander(f"{len(table)} selected run(s)", expanded=len(table) <= EXPANDED_UP_TO):
        st.table(table.style.apply(colour_ids, subset=["run"]).hide(axis="index"))

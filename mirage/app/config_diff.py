"""The resolved configs (and plugin versions, git commits, reproducibility records) of
two runs, diffed."""

from __future__ import annotations

import json

import streamlit as st

from mirage.app import queries
from mirage.app.config_paths import diff
from mirage.app.picker import Selection


def config_diff(sel: Selection) -> None:
    st.subheader("Config diff")
    if len(sel.run_ids) < 2:
        st.info("Select two or more runs to diff their configs.")
        return
    pick_left, pick_right = st.columns(2)
    left = pick_left.selectbox("run", sel.run_ids, index=0, key="diff_left")
    right = pick_right.selectbox("against", sel.run_ids, index=1, key="diff_right")
    rows = queries.configs(sel.reader, [left, right]).set_index("run_id")

    def resolved(run_id: str) -> dict:
        row = rows.loc[run_id]
        plugins = {p["name"]: p.get("version") for p in json.loads(row["plugins"])}
        environment = row["environment"]  # package versions, host, device, threads
        return {"config": json.loads(row["config"]), "plugins": plugins,
                "git_commit": row["git_commit"],
                "environment": json.loads(environment) if isinstance(environment, str) else {}}

    table = diff(resolved(left), resolved(right)).rename(columns={"left": left, "right": right})
    if left == right or table.empty:
        st.success("Identical configs, plugins, commits and environments.")
        return
    st.dataframe(table, hide_index=True)

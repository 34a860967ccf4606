"""Read the policy's own words: for a chosen run and two steps, the sampled prompts,
reasonings and actions side by side, one step above the other. Reasonings that stay the same whatever the prompt
are template collapse (PAPER.md section 2)."""

from __future__ import annotations

import streamlit as st

from mirage.app import queries
from mirage.app.picker import Selection

COLUMNS = ["prompt_index", "sample_index", "turn", "reasoning", "action", "reward", "prompt"]


def rollout_browser(sel: Selection) -> None:
    st.subheader("Rollout browser")
    pick_run, pick_turns = st.columns([3, 1])
    run_id = pick_run.selectbox("run", sel.run_ids, key="rollout_run")
    steps = queries.rollout_steps(sel.reader, run_id)
    if not steps:
        st.info(f"Run `{run_id}` stored no sampled rollouts: its store predates the rollouts "
                "table, or it ran with `rollout.stored_trajectories: 0`.")
        return
    first_turns = pick_turns.toggle("first turns only", value=True, key="rollout_first")
    picks = st.columns(2)
    chosen = [picks[0].select_slider("step", steps, value=steps[0], key="rollout_step_a"),
              picks[1].select_slider("compared with step", steps, value=steps[-1],
                                     key="rollout_step_b")]
    for step in chosen:  # full width each: the reasonings are what a reader compares
        rows = queries.rollouts(sel.reader, run_id, step)
        if first_turns:
            rows = rows[rows["turn"] == 0]
        trajectories = len(rows[["prompt_index", "sample_index"]].drop_duplicates())
        st.caption(f"step {step}: {trajectories} trajectories of "
                   f"{rows['prompt_index'].nunique()} prompts")
        st.dataframe(rows[COLUMNS], hide_index=True, column_config={
            "prompt": st.column_config.TextColumn(width="medium"),
            "reasoning": st.column_config.TextColumn(width="large"),
        })

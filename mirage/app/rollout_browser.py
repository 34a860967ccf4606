"""Read the policy's own words: for a chosen run and two steps, the sampled prompts,
reasonings and actions side by side, one step above the other. Reasonings that stay the same whatever the prompt
are template collapse (PAPER.md section 2).

A run in image mode also shows, under each step's table, the picture each turn's prompt
showed beside the turn's reasoning and action: in image mode the prompt's words are the
same for every room, and only the picture tells what the reasoning should have read."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from mirage.app import queries
from mirage.app.picker import Selection

COLUMNS = ["prompt_index", "sample_index", "turn", "reasoning", "action", "reward", "prompt"]
# Turns drawn with their pictures per step (the table above lists every turn).
PICTURED_TURNS = 12
PICTURE_WIDTH = 128  # pixels: a 4 x 4 lake of 16-pixel tiles, drawn twice its size


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
        pictured = rows[rows["images"].map(len) > 0]
        columns = COLUMNS + (["pictures"] if not pictured.empty else [])
        st.dataframe(rows.assign(pictures=rows["images"].map(len))[columns], hide_index=True,
                     column_config={
                         "prompt": st.column_config.TextColumn(width="medium"),
                         "reasoning": st.column_config.TextColumn(width="large"),
                     })
        if not pictured.empty:
            pictured_turns(step, pictured)


def pictured_turns(step: int, rows: pd.DataFrame) -> None:
    """Each turn's pictures beside its reasoning and action (the first PICTURED_TURNS)."""
    shown = rows.head(PICTURED_TURNS)
    st.caption(f"step {step}: what the prompt showed, beside the reasoning and the action"
               + (f" (the first {len(shown)} of {len(rows)} turns)" if len(rows) > len(shown) else ""))
    for row in shown.itertuples():
        picture, words = st.columns([1, 5])
        label = f"prompt {row.prompt_index}, sample {row.sample_index}, turn {row.turn}"
        picture.image(row.images, width=PICTURE_WIDTH, output_format="PNG",
                      caption=[label] + [""] * (len(row.images) - 1))
        words.text(f"reasoning  {row.reasoning}\naction     {row.action}\nreward     {row.reward:g}")

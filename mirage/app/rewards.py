"""Prompt-level reward distribution early, middle and late in each run (PAPER.md
finding 9: prompts move hard -> mixed -> variance collapse as training converges)."""

from __future__ import annotations

import streamlit as st

from mirage.app import charts, queries
from mirage.app.hints import missing
from mirage.app.picker import Selection

SHARES = ("reward/hard_share", "reward/mixed_share", "reward/easy_share")


def reward_distribution(sel: Selection) -> None:
    st.subheader("Prompt-level reward distribution: early, middle, late")
    st.caption("Each run's steps split in thirds. Hard: all G rollouts of a prompt fail; "
               "easy: all succeed; mixed: some do.")
    if any(sel.has(name) for name in SHARES):
        shares = sel.labelled(queries.reward_shares(sel.reader, sel.run_ids))
        st.altair_chart(charts.share_bars(shares, "Hard / mixed / easy prompts"),
                        width="content")
    else:
        missing(SHARES[0])
    histogram = sel.labelled(queries.reward_histogram(sel.reader, sel.run_ids))
    if histogram.empty:
        st.info("The selected runs stored no prompt groups yet.")
        return
    st.altair_chart(charts.reward_histogram(histogram, "Prompts by mean return (groups table)"),
                    width="content")

"""Views over steps: the paper's central figure (validation success, retrieval accuracy
against chance, entropy), MI proxies against entropy, filter behaviour and gradient
norms per reward-variance bucket."""

from __future__ import annotations

import streamlit as st

from mirage.app import charts, queries
from mirage.app.hints import missing
from mirage.app.picker import Selection

ENTROPIES = ("update/entropy", "h_cond", "h_marg", "policy_entropy")  # bare: mi/{scope}/...
MI_PROXIES = ("mi_est", "mi_seq_est", "mi_zscore", "mi_zscore_ema", "retrieval_acc",
              "recall@2", "recall@4", "recall@8")
GRAD_NORMS = ("total", "per_sample", "per_token")


def scoped(sel: Selection, names: tuple[str, ...]) -> list[str]:
    """The names the runs logged, ``mi/{scope}/`` prefixed where bare."""
    full = [name if "/" in name else f"mi/{sel.scope}/{name}" for name in names]
    return [name for name in full if sel.has(name)]


def _curve(sel: Selection, names: list[str], title: str, y_title: str, alarms=None) -> None:
    """A chart of ``names`` over steps, or why it is missing."""
    present = [name for name in names if sel.has(name)]
    if not present:
        missing(names[0])
        return
    frame = sel.labelled(queries.curves(sel.reader, sel.run_ids, present,
                                        sel.settings.max_points))
    st.altair_chart(charts.over_steps(frame, title, y_title, sel.colours, alarms), width="stretch")


def training_dynamics(sel: Selection) -> None:
    """Validation success, retrieval accuracy with its chance level, and entropy."""
    st.subheader("Training dynamics")
    alarms = sel.labelled(queries.events(sel.reader, sel.run_ids, "collapse_alarm"))
    entropies = scoped(sel, ENTROPIES)
    entropy = entropies[0] if entropies else "update/entropy"
    if len(entropies) > 1:  # above the charts, so the three line up
        entropy = st.columns(3)[2].selectbox("entropy", entropies, key="dyn_entropy")
    left, middle, right = st.columns(3)
    with left:
        _curve(sel, ["val/success", "val_greedy/success"], "Validation success", "success rate",
               alarms)
    with middle:
        scope = f"mi/{sel.scope}"
        _curve(sel, [f"{scope}/retrieval_acc", f"{scope}/retrieval_chance"],
               "Retrieval accuracy vs chance", f"retrieval accuracy ({sel.scope})", alarms)
    with right:
        _curve(sel, [entropy], "Entropy", entropy, alarms)
    if not alarms.empty:
        with st.expander(f"{len(alarms)} collapse alarm(s)"):
            st.dataframe(alarms.drop(columns="run"), hide_index=True)


def mi_vs_entropy(sel: Selection) -> None:
    """An MI proxy over steps and each run's path through (entropy, MI)."""
    st.subheader("MI proxies vs entropy")
    proxies, entropies = scoped(sel, MI_PROXIES), scoped(sel, ENTROPIES)
    if not proxies:
        missing(f"mi/{sel.scope}/mi_est")
        return
    pick, pick_entropy = st.columns(2)
    proxy = pick.selectbox("MI proxy", proxies, key="mi_proxy")
    if not entropies:
        missing("update/entropy")
        return
    # H(Z|X) is logged with the MI proxies at the same steps; the update's entropy is not
    conditional = f"mi/{sel.scope}/h_cond"
    default = entropies.index(conditional) if conditional in entropies else 0
    entropy = pick_entropy.selectbox("against", entropies, index=default, key="mi_entropy")
    left, right = st.columns(2)
    with left:
        _curve(sel, [proxy], f"{proxy} over steps", proxy)
    with right:
        frame = sel.labelled(queries.paired(sel.reader, sel.run_ids, entropy, proxy))
        if frame.empty:
            st.info(f"No step has both `{entropy}` and `{proxy}` yet.")
        else:
            st.altair_chart(charts.connected(frame, f"{proxy} vs {entropy}", entropy, proxy,
                                             sel.colours),
                            width="stretch")


def filter_behaviour(sel: Selection) -> None:
    """Kept ratio and zero-variance group count over steps."""
    st.subheader("Filter behaviour")
    left, right = st.columns(2)
    with left:
        _curve(sel, ["filter/kept_ratio"], "Kept ratio", "kept groups / P")
    with right:
        name = "filter/zero_variance_groups" if sel.has("filter/zero_variance_groups") \
            else "reward/zero_variance_groups"
        _curve(sel, [name], "Zero-variance groups", "groups with equal returns")


def gradient_norms(sel: Selection) -> None:
    """Mean gradient norm per reward-variance bucket for task, entropy and KL terms."""
    st.subheader("Gradient norms by reward-variance bucket")
    if not any(name.startswith("grad/") for name in sel.names):
        missing("grad/*")
        return
    norm = st.radio("norm", GRAD_NORMS, horizontal=True, key="grad_norm")
    frame = sel.labelled(queries.grad_norms(sel.reader, sel.run_ids, norm))
    if frame.empty:
        st.info(f"No `grad/*/*/{norm}` metrics in the selected runs.")
        return
    st.altair_chart(charts.grad_bars(frame, "Gradient norm per bucket and term", norm),
                    width="content")

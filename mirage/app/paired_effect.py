"""Did the filter help? Two settings of one config section (the filter by default)
compared seed by seed: runs of the two arms that share a seed and every other config
value form a pair, and the view states the mean paired difference of a final metric
with its interval (mirage.report.paired, the statistics ``core report`` uses)."""

from __future__ import annotations

import json
import math

import pandas as pd
import streamlit as st

from mirage.app import queries
from mirage.app.config_paths import flatten, moving_with, unchosen, varying_paths
from mirage.app.hints import missing
from mirage.app.picker import Selection
from mirage.app.sweeps import FINALS
from mirage.report.paired import CONFIDENCE, paired


def _value(flat: dict, path: str) -> str:
    if path not in flat:
        return "(absent)"
    return flat[path] if isinstance(flat[path], str) else json.dumps(flat[path], default=str)


def _labels(flats: dict[str, dict], paths: list[str]) -> dict[str, str]:
    """run id -> ``path=value, ...`` over ``paths`` ("" when there are none)."""
    return {run_id: ", ".join(f"{path}={_value(flat, path)}" for path in paths)
            for run_id, flat in flats.items()}


def _arm_paths(configs: dict[str, dict], section: str) -> list[str]:
    return [path for path in varying_paths(list(configs.values()))
            if path.split(".")[0] == section]


def arms(sel: Selection, configs: dict[str, dict], section: str) -> pd.DataFrame:
    """One row per run: run_id, seed, arm (its values under ``section``) and context
    (its values on the other paths where runs of one arm still differ)."""
    flats = {run_id: flatten(config) for run_id, config in configs.items()}
    arm_paths = _arm_paths(configs, section)
    context_paths = unchosen(list(configs.values()), arm_paths)
    arm, context = _labels(flats, arm_paths), _labels(flats, context_paths)
    seeds = dict(zip(sel.runs["run_id"], sel.runs["seed"]))
    return pd.DataFrame({"run_id": list(configs), "seed": [seeds.get(r) for r in configs],
                         "arm": [arm[r] for r in configs],
                         "context": [context[r] for r in configs]})


def paired_rows(runs: pd.DataFrame, finals: pd.Series, arm_a: str, arm_b: str) -> pd.DataFrame:
    """Per context: the paired difference A - B of the final values over the seeds both
    arms ran (a seed run twice in one arm counts once, its newest run: ``runs`` is
    newest first)."""
    rows = []
    for context, runs_here in runs.groupby("context", sort=True):
        by_arm = {}
        for arm in (arm_a, arm_b):
            picked = runs_here[(runs_here["arm"] == arm) & runs_here["run_id"].isin(finals.index)]
            picked = picked.dropna(subset=["seed"]).drop_duplicates("seed")
            by_arm[arm] = {int(seed): float(finals[run]) for seed, run in
                           zip(picked["seed"], picked["run_id"])}
        common = sorted(set(by_arm[arm_a]) & set(by_arm[arm_b]))
        if not common:
            continue
        result = paired({s: by_arm[arm_a][s] for s in common},
                        {s: by_arm[arm_b][s] for s in common})
        unpaired = sorted((set(by_arm[arm_a]) | set(by_arm[arm_b])) - set(common))
        rows.append({"context": context or "(same config)", "seeds": result.n,
                     "mean difference": result.mean, "t low": result.low,
                     "t high": result.high, "p": result.p_value,
                     "unpaired seeds": ", ".join(map(str, unpaired))})
    return pd.DataFrame(rows)


def _pairs(runs: pd.DataFrame, arm_a: str, arm_b: str) -> int:
    """How many (context, seed) pairs the two arms share."""
    keys = [set(map(tuple, runs.loc[runs["arm"] == arm, ["context", "seed"]].values))
            for arm in (arm_a, arm_b)]
    return len(keys[0] & keys[1])


def _statement(row: pd.Series, arm_a: str, arm_b: str, metric: str) -> str:
    level = f"{CONFIDENCE:.0%}"
    head = f"**{arm_a}** minus **{arm_b}**, final `{metric}`"
    where = "" if row["context"] == "(same config)" else f" ({row['context']})"
    if math.isnan(row["t low"]):
        return (f"{head}{where}: {row['mean difference']:+.3f} from one paired seed; "
                f"no interval.")
    return (f"{head}{where}: {row['mean difference']:+.3f}, {level} interval "
            f"[{row['t low']:+.3f}, {row['t high']:+.3f}] over {row['seeds']} paired seeds "
            f"(p = {row['p']:.3g}).")


def paired_effect(sel: Selection) -> None:
    st.subheader("Did the filter help? Paired differences across seeds")
    finals = [name for name in FINALS if sel.has(name)]
    if not finals:
        missing("val/success")
        return
    configs = {row["run_id"]: json.loads(row["config"])
               for _, row in queries.configs(sel.reader, sel.run_ids).iterrows()}
    sections = sorted({path.split(".")[0] for path in varying_paths(list(configs.values()))})
    if not sections:
        st.info("The selected runs share one config (seeds aside): select runs of two "
                "settings, e.g. filter none and top_p over the same seeds.")
        return
    pick_metric, pick_section, pick_a, pick_b = st.columns(4)
    metric = pick_metric.selectbox("final metric", finals, key="paired_metric")
    section = pick_section.selectbox(
        "compare", sections, index=sections.index("filter") if "filter" in sections else 0,
        key="paired_section")
    runs = arms(sel, configs, section)
    labels = sorted(runs["arm"].unique())
    if len(labels) < 2:
        st.info(f"The selected runs share one `{section}` setting.")
        return
    baseline = next((label for label in labels if "=none" in label), labels[-1])
    arm_b = pick_b.selectbox("against", labels, index=labels.index(baseline), key="paired_b")
    values = queries.finals(sel.reader, sel.run_ids, metric).set_index("run_id")["value"]
    others = sorted((label for label in labels if label != arm_b),
                    key=lambda label: -_pairs(runs, label, arm_b))  # best paired first
    arm_a = pick_a.selectbox("arm", others, key="paired_a")
    table = paired_rows(runs, values, arm_a, arm_b)
    if table.empty:
        st.info(f"No seed ran both `{arm_a}` and `{arm_b}` with the rest of the config "
                "equal: nothing to pair.")
        return
    st.markdown("\n".join(f"- {_statement(row, arm_a, arm_b, metric)}"
                          for _, row in table.iterrows()))
    moved = moving_with(list(configs.values()), _arm_paths(configs, section))
    if moved:
        st.caption("Between these runs, " + ", ".join(f"`{path}`" for path in moved)
                   + f" changed together with `{section}`: the difference measures both.")
    st.dataframe(table, hide_index=True)

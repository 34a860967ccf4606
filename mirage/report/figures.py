"""The report's figures, drawn with matplotlib (Agg) into PNG files; each function
returns the file name it wrote."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from mirage.report.results import Study  # noqa: E402
from mirage.report.summary import endpoint  # noqa: E402

TITLES = {
    "val/success": "success (t=0.5)",
    "mi/first_turn/retrieval_acc": "first-turn retrieval acc.",
    "mi/first_turn/policy_entropy": "first-turn policy entropy",
    "mi/first_turn/reasoning_tokens": "reasoning tokens",
    "mi/first_turn/h_cond": "first-turn H(Z|X)",
    "mi/first_turn/retrieval_chance": "retrieval chance",
    "mi/first_turn/format_valid": "first-turn format validity",
    "mi/first_turn/mi_est": "first-turn MI-Est",
}
SEED_STYLES = ["-", "--", ":", "-."]


def _save(fig, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def training_curves(study: Study, runs: pd.DataFrame, filters: list[str], names: list[str],
                    path: Path, chance: float | None = None) -> str:
    """One row per environment, one panel per metric: the mean over seeds per filter,
    shaded between the lowest and highest seed."""
    envs = sorted(runs["env"].unique())
    fig, axes = plt.subplots(len(envs), len(names), figsize=(3.2 * len(names), 2.6 * len(envs)),
                             squeeze=False)
    series_of = {name: study.series(name) for name in names}
    for row, env in enumerate(envs):
        for col, name in enumerate(names):
            ax = axes[row][col]
            series = series_of[name]
            for index, flt in enumerate(filters):
                ids = runs[(runs["env"] == env) & (runs["filter"] == flt)]["run_id"]
                part = series[series["run_id"].isin(ids)]
                if part.empty:
                    continue
                by_step = part.groupby("step")["value"]
                mean = by_step.mean()
                ax.plot(mean.index, mean.to_numpy(), label=flt, color=f"C{index}",
                        marker="." if len(mean) < 8 else None)
                ax.fill_between(mean.index, by_step.min().to_numpy(), by_step.max().to_numpy(),
                                color=f"C{index}", alpha=0.15)
            if chance is not None and name.endswith("retrieval_acc"):
                ax.axhline(chance, color="grey", linestyle="--", linewidth=1, label="chance")
            ax.set_title(f"{env}: {TITLES.get(name, name)}", fontsize=9)
            ax.set_xlabel("iteration", fontsize=8)
            ax.tick_params(labelsize=7)
        axes[row][0].legend(fontsize=7)
    return _save(fig, path)


def final_bars(study: Study, runs: pd.DataFrame, filters: list[str], name: str, path: Path) -> str:
    """Endpoint of ``name`` per environment and filter: mean bar, one dot per seed."""
    finals = endpoint(study, name)
    finals = finals[finals["run_id"].isin(runs["run_id"])]
    envs = sorted(runs["env"].unique())
    fig, axes = plt.subplots(1, len(envs), figsize=(3.4 * len(envs), 2.8), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for i, flt in enumerate(filters):
            values = finals[(finals["env"] == env) & (finals["filter"] == flt)]["value"]
            ax.bar(i, values.mean(), color=f"C{i}", alpha=0.6)
            ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)
        ax.set_xticks(range(len(filters)), filters, fontsize=8)
        ax.set_title(f"{env}: endpoint {TITLES.get(name, name)}", fontsize=9)
    return _save(fig, path)


def step_time_bars(table: pd.DataFrame, path: Path) -> str:
    envs = sorted(table["env"].unique())
    fig, axes = plt.subplots(1, len(envs), figsize=(3.4 * len(envs), 2.8), squeeze=False)
    for ax, env in zip(axes[0], envs):
        part = table[table["env"] == env]
        x = range(len(part))
        ax.bar(x, part["step s (no diagnostics)"], label="step", alpha=0.6)
        ax.bar(x, part["update s"], label="update", alpha=0.9)
        ax.set_xticks(list(x), list(part["filter"]), fontsize=8)
        ax.set_ylabel("seconds", fontsize=8)
        ax.set_title(f"{env}: time per iteration", fontsize=9)
    axes[0][0].legend(fontsize=7)
    return _save(fig, path)


def correlation_bars(table: pd.DataFrame, path: Path) -> str:
    groups = list(dict.fromkeys(table["runs"]))
    fig, axes = plt.subplots(1, len(groups), figsize=(3.8 * len(groups), 3.4), squeeze=False, sharey=True)
    for ax, group in zip(axes[0], groups):
        part = table[table["runs"] == group]
        ax.barh(part["diagnostic"], part["spearman"],
                color=["C2" if v > 0 else "C3" for v in part["spearman"]])
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlim(-1, 1)
        ax.set_title(f"Spearman with success endpoint: {group}", fontsize=9)
        ax.tick_params(labelsize=7)
    return _save(fig, path)


def slip_lines(table: pd.DataFrame, path: Path) -> str:
    columns = [("mean", "success endpoint (t=0.5)"), ("H(Z|X)", "H(Z|X) endpoint"),
               ("retrieval acc.", "retrieval acc. endpoint")]
    fig, axes = plt.subplots(1, len(columns), figsize=(3.3 * len(columns), 2.7), squeeze=False)
    for ax, (column, title) in zip(axes[0], columns):
        for flt, part in table.groupby("filter", sort=False):
            ax.plot(part["slip"], part[column], marker="o", label=flt)
        ax.set_xlabel("slip", fontsize=8)
        ax.set_title(f"FrozenLake: {title}", fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=7)
    return _save(fig, path)


def ablation_bars(table: pd.DataFrame, path: Path) -> str:
    columns = ["success (endpoint)", "retrieval (endpoint)", "entropy (endpoint)"]
    fig, axes = plt.subplots(1, len(columns), figsize=(3.6 * len(columns), 3.0), squeeze=False)
    for ax, column in zip(axes[0], columns):
        ax.barh(table["filter"], table[column], color=[f"C{i}" for i in range(len(table))])
        ax.set_title(f"Sokoban: {column}", fontsize=9)
        ax.tick_params(labelsize=7)
    return _save(fig, path)


def seed_curves(study: Study, runs: pd.DataFrame, names: list[str], path: Path,
                chance: str | None = None) -> str:
    """One panel row per metric in ``names``, one column per environment, one line per
    seed (line style) and filter (colour, "none" first); a retrieval panel also draws the
    mean of the ``chance`` metric over those runs."""
    envs = sorted(runs["env"].unique())
    arms = ["none", *sorted(f for f in runs["filter"].unique() if f != "none")]
    seeds = sorted(runs["seed"].unique())
    fig, axes = plt.subplots(len(names), len(envs), figsize=(4.2 * len(envs), 2.4 * len(names)),
                             squeeze=False)
    for col, env in enumerate(envs):
        env_runs = runs[runs["env"] == env]
        for row, name in enumerate(names):
            ax = axes[row][col]
            series = study.series(name)
            for index, flt in enumerate(arms):
                for order, seed in enumerate(seeds):
                    ids = env_runs[(env_runs["filter"] == flt) & (env_runs["seed"] == seed)]["run_id"]
                    part = series[series["run_id"].isin(ids)].sort_values("step")
                    if not part.empty:
                        ax.plot(part["step"], part["value"], color=f"C{index}", linewidth=1,
                                linestyle=SEED_STYLES[order % len(SEED_STYLES)],
                                label=f"{flt}, seed {seed}")
            if chance is not None and name.endswith("retrieval_acc"):
                level = study.series(chance)
                level = level[level["run_id"].isin(env_runs["run_id"])].groupby("step")["value"].mean()
                ax.plot(level.index, level.to_numpy(), color="grey", linewidth=1, label="chance")
            ax.set_title(f"{env}: {TITLES.get(name, name)}", fontsize=9)
            ax.set_xlabel("iteration", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=6)
    return _save(fig, path)


def arm_seed_curves(study: Study, runs: pd.DataFrame, arm: str, names: list[str], path: Path,
                    chance: str | None = None) -> str:
    """One panel row per metric in ``names``, one column per arm (the ``arm`` column of
    ``runs``), one line per seed (its colour the same in every panel); a retrieval panel
    also draws the mean of the ``chance`` metric over the arm's runs."""
    arms = list(dict.fromkeys(runs[arm]))
    seeds = sorted(runs["seed"].unique())
    fig, axes = plt.subplots(len(names), len(arms), figsize=(3.0 * len(arms), 2.3 * len(names)),
                             squeeze=False, sharey="row")
    for row, name in enumerate(names):
        series = study.series(name)
        for col, label in enumerate(arms):
            ax = axes[row][col]
            arm_runs = runs[runs[arm] == label]
            for index, seed in enumerate(seeds):
                part = series[series["run_id"].isin(arm_runs[arm_runs["seed"] == seed]["run_id"])]
                part = part.sort_values("step")
                if not part.empty:
                    ax.plot(part["step"], part["value"], color=f"C{index}", linewidth=1, label=f"seed {seed}")
            if chance is not None and name.endswith("retrieval_acc"):
                level = study.series(chance)
                level = level[level["run_id"].isin(arm_runs["run_id"])].groupby("step")["value"].mean()
                ax.plot(level.index, level.to_numpy(), color="grey", linewidth=1, linestyle=":", label="chance")
            ax.set_title(f"{label}: {TITLES.get(name, name)}", fontsize=8)
            ax.set_xlabel("iteration", fontsize=7)
            ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=6)
    return _save(fig, path)

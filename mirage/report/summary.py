"""Small summaries the findings share: per-configuration means over seeds with their
spread, each run's endpoint (the mean of its last few checks), changes from the start to
the endpoint, per-seed values for paired comparisons, and a Markdown table."""

from __future__ import annotations

import math

import pandas as pd

from mirage.report.results import Study

# Validation success and the MI proxies are noisy per check (64 episodes, 8 x 8 samples),
# so a run's endpoint is the mean of its last LAST_CHECKS checks after the warm start.
LAST_CHECKS = 3


def over_seeds(values: pd.DataFrame, by: list[str], column: str = "value") -> pd.DataFrame:
    """Mean, min, max and spread (max - min) of ``column`` over the seeds of each ``by``
    group, with the number of seeds."""
    grouped = values.groupby(by, sort=False)[column]
    table = grouped.agg(mean="mean", low="min", high="max", seeds="count").reset_index()
    table["spread"] = table["high"] - table["low"]
    return table


def window_mean(study: Study, name: str, first_step: int = 1) -> pd.DataFrame:
    """Each run's mean of ``name`` over its steps from ``first_step`` on (training, not
    the warm start), with the run labels."""
    rows = study.series(name)
    rows = rows[rows["step"] >= first_step]
    means = rows.groupby("run_id", as_index=False)["value"].mean()
    return means.merge(study.runs, on="run_id")


def endpoint(study: Study, name: str, last: int = LAST_CHECKS) -> pd.DataFrame:
    """Each run's mean of ``name`` over its last ``last`` logged steps from step 1 on
    (training, not the warm start; fewer when the run logged fewer), with the run labels."""
    rows = study.series(name)
    rows = rows[rows["step"] >= 1].sort_values("step")
    means = rows.groupby("run_id").tail(last).groupby("run_id", as_index=False)["value"].mean()
    return means.merge(study.runs, on="run_id")


def change(study: Study, name: str, last: int = LAST_CHECKS) -> pd.DataFrame:
    """Per run: ``name`` at its first logged step (the warm start), its endpoint (see
    :func:`endpoint`) and the change between them."""
    rows = study.series(name).sort_values("step")
    first = rows.groupby("run_id").head(1).set_index("run_id")["value"]
    end = endpoint(study, name, last).set_index("run_id")["value"]
    frame = pd.DataFrame({"start": first, "end": end}).dropna()
    frame["change"] = frame["end"] - frame["start"]
    return frame.reset_index(names="run_id").merge(study.runs, on="run_id")


def by_seed(frame: pd.DataFrame, column: str = "value") -> dict[int, float]:
    """Seed -> ``column`` of a frame holding one row per seed (one arm of a comparison);
    ValueError when a seed appears twice, since the arm then mixes configurations."""
    if frame["seed"].duplicated().any():
        raise ValueError(f"several runs per seed in one arm: {sorted(frame['seed'])}")
    return {int(seed): float(value) for seed, value in zip(frame["seed"], frame[column])}


def markdown_table(frame: pd.DataFrame, digits: int = 3) -> str:
    """``frame`` as a GitHub Markdown table, floats rounded to ``digits``; a ``|`` inside a
    cell (as in H(Z|X)) is escaped so it does not split the cell."""
    def cell(value) -> str:
        if isinstance(value, float):
            return "" if math.isnan(value) else f"{value:.{digits}f}"
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(cell(str(c)) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def seed_range(values: pd.Series) -> str:
    """'low-high' of one configuration's values over its seeds."""
    return f"{values.min():.2f}-{values.max():.2f}"


def mean_and_range(values: pd.Series) -> str:
    """'mean (low-high)' of one configuration's values over its seeds."""
    return f"{values.mean():.3f} ({seed_range(values)})"


def mean_with_spread(table: pd.DataFrame) -> pd.Series:
    """'mean (low-high)' strings for an :func:`over_seeds` table."""
    return table.apply(lambda r: f"{r['mean']:.3f} ({r['low']:.2f}-{r['high']:.2f})", axis=1)

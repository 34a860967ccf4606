"""The app's SQL: every aggregation runs in DuckDB, every value is a parameter.

Each function takes a :class:`~mirage.app.reader.StoreReader` and the selected run ids
and returns a small DataFrame ready to chart. Metrics are long format
``(run_id, step, name, value)`` (docs/metrics.md); a run's *final* value of a metric is
its value at the last step that has one.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from mirage.app.reader import StoreReader
from mirage.core.analysis import signature
from mirage.core.store.heartbeat import effective_status

# What the Spearman table and the scatter views treat as a diagnostic (a regex on names).
DIAGNOSTIC_PATTERN = (
    r"^(mi|reward|grad)/|^update/(entropy|kl)$|^filter/(kept_ratio|zero_variance_groups|rv_cv)$"
)
PHASES = ("early", "middle", "late")
_IN_RUNS = "list_contains(?::TEXT[], run_id)"
_FINAL = (
    "SELECT run_id, arg_max(value, step) AS value FROM metrics"
    f" WHERE name = ? AND {_IN_RUNS} GROUP BY run_id"
)


def json_path(dotted: str) -> str:
    """A DuckDB JSON path for a dotted config path: ``filter.rho`` -> ``$."filter"."rho"``."""
    return "$." + ".".join('"' + part.replace('"', '\\"') + '"' for part in dotted.split("."))


# runs-table columns read when the store has them (newer stores add them)
OPTIONAL_RUN_COLUMNS = ("name", "tags")
# what mirage.core.store.heartbeat needs to tell a running run from a crashed one
LIVENESS_COLUMNS = ("pid", "host", "process_started", "heartbeat_at")


def runs(reader: StoreReader) -> pd.DataFrame:
    """Every run, newest first, with the config fields the run picker filters on (and
    the columns of OPTIONAL_RUN_COLUMNS the store has). ``status`` is the effective one:
    a ``running`` run whose process is gone reads ``crashed`` (mirage/core/store/heartbeat.py)."""
    if not reader.has_table("runs"):
        return pd.DataFrame()
    present = reader.columns("runs")
    optional = "".join(f'"{c}", ' for c in OPTIONAL_RUN_COLUMNS + LIVENESS_COLUMNS if c in present)
    frame = reader.query(
        f"""
        SELECT run_id, status, experiment, cell, {optional}
               coalesce(seed, TRY_CAST(json_extract_string(config, '$.seed') AS BIGINT)) AS seed,
               json_extract_string(config, '$.env.name') AS env,
               json_extract_string(config, '$.algorithm.name') AS algorithm,
               json_extract_string(config, '$.filter.name') AS filter,
               TRY_CAST(json_extract_string(config, '$.filter.rho') AS DOUBLE) AS rho,
               last_step, TRY_CAST(json_extract_string(config, '$.steps') AS BIGINT) AS steps,
               error, created_at, updated_at
        FROM runs ORDER BY created_at DESC, run_id DESC
        """
    )
    if not frame.empty:
        frame["status"] = [_effective_status(row) for row in frame.to_dict("records")]
    return frame.drop(columns=[c for c in LIVENESS_COLUMNS if c in frame.columns])


def _missing(value: object) -> bool:
    return value is None or bool(pd.isna(value))


def _effective_status(row: dict) -> str:
    """``effective_status`` of a runs-frame row (naive UTC timestamps, NaN for NULL)."""
    def utc(value: object):
        return None if _missing(value) else pd.Timestamp(value).tz_localize("UTC").to_pydatetime()

    return effective_status({
        "status": row["status"], "host": None if _missing(row.get("host")) else row["host"],
        "pid": None if _missing(row.get("pid")) else int(row["pid"]),
        "process_started": None if _missing(row.get("process_started")) else float(row["process_started"]),
        "heartbeat_at": utc(row.get("heartbeat_at")), "updated_at": utc(row["updated_at"]),
    })


def metric_names(reader: StoreReader, run_ids: Sequence[str]) -> list[str]:
    """Names logged by any of the runs, sorted."""
    frame = reader.query(
        f"SELECT DISTINCT name FROM metrics WHERE {_IN_RUNS} ORDER BY name", [list(run_ids)]
    )
    return frame["name"].tolist()


def curves(reader: StoreReader, run_ids: Sequence[str], names: Sequence[str],
           max_points: int) -> pd.DataFrame:
    """``run_id, name, step, value`` over steps; runs longer than ``max_points`` steps are
    averaged over equal step buckets (each point at its bucket's last step)."""
    return reader.query(
        f"""
        WITH picked AS (
            SELECT run_id, step, name, value FROM metrics
            WHERE {_IN_RUNS} AND list_contains(?::TEXT[], name)
        ), width AS (
            SELECT greatest(1, ceil((max(step) + 1) / ?))::BIGINT AS w FROM picked
        )
        SELECT run_id, name, max(step) AS step, avg(value) AS value
        FROM picked, width GROUP BY run_id, name, step // w ORDER BY run_id, name, step
        """,
        [list(run_ids), list(names), max_points],
    )


# x axis -> per-run running total at each step it was logged (the x of a point is the
# total at the last such step at or before it; 0 before the first)
X_AXES = {
    "step": None,
    # seconds per step (docs/metrics.md), summed: minutes since the run's first step
    "wall time (min)": (
        "SELECT run_id, step, sum(value) OVER (PARTITION BY run_id ORDER BY step) / 60 AS x"
        f" FROM metrics WHERE name = 'time/step' AND {_IN_RUNS}"
    ),
    # every step that logged train/success sampled P x G trajectories
    "trajectories seen": (
        "SELECT m.run_id, m.step, count(*) OVER (PARTITION BY m.run_id ORDER BY m.step)"
        " * TRY_CAST(json_extract_string(r.config, '$.rollout.prompts') AS BIGINT)"
        " * TRY_CAST(json_extract_string(r.config, '$.rollout.group_size') AS BIGINT) AS x"
        " FROM metrics m JOIN runs r USING (run_id)"
        f" WHERE m.name = 'train/success' AND list_contains(?::TEXT[], m.run_id)"
    ),
}


def series(reader: StoreReader, run_ids: Sequence[str], names: Sequence[str], x_axis: str,
           max_points: int) -> pd.DataFrame:
    """``run_id, name, step, x, value``: :func:`curves` with each point's ``x`` on the
    chosen axis (a key of :data:`X_AXES`; x is the bucket's last)."""
    if x_axis not in X_AXES:
        raise ValueError(f"unknown x axis {x_axis!r}; valid: {', '.join(X_AXES)}")
    totals = X_AXES[x_axis]
    if totals is None:
        placed, params = "SELECT *, step::DOUBLE AS x FROM picked", []
    else:
        placed = ("SELECT p.*, coalesce(t.x, 0)::DOUBLE AS x FROM picked p"
                  " ASOF LEFT JOIN totals t ON p.run_id = t.run_id AND p.step >= t.step")
        params = [list(run_ids)]
    with_totals = "" if totals is None else f", totals AS ({totals})"
    return reader.query(
        f"""
        WITH picked AS (
            SELECT run_id, step, name, value FROM metrics
            WHERE {_IN_RUNS} AND list_contains(?::TEXT[], name)
        ){with_totals}, placed AS ({placed}), width AS (
            SELECT greatest(1, ceil((max(step) + 1) / ?))::BIGINT AS w FROM picked
        )
        SELECT run_id, name, max(step) AS step, max(x) AS x, avg(value) AS value
        FROM placed, width GROUP BY run_id, name, step // w ORDER BY run_id, name, step
        """,
        [list(run_ids), list(names), *params, max_points],
    )


def paired(reader: StoreReader, run_ids: Sequence[str], x_name: str,
           y_name: str) -> pd.DataFrame:
    """``run_id, step, x, y`` at the steps where a run logged both metrics."""
    return reader.query(
        f"""
        SELECT run_id, step, max(value) FILTER (WHERE name = ?) AS x,
               max(value) FILTER (WHERE name = ?) AS y
        FROM metrics WHERE {_IN_RUNS} AND name IN (?, ?)
        GROUP BY run_id, step HAVING x IS NOT NULL AND y IS NOT NULL ORDER BY run_id, step
        """,
        [x_name, y_name, list(run_ids), x_name, y_name],
    )


def run_summaries(reader: StoreReader, run_ids: Sequence[str], target: str,
                  window: tuple[int, int] | None = None) -> pd.DataFrame:
    """One row per run and name, long format (``run_id, step, name, value``): each
    diagnostic's last value (or its mean over the inclusive step ``window``) and the
    run's final ``target`` value."""
    if window is None:
        diagnostic = "SELECT run_id, max(step) AS step, name, arg_max(value, step) AS value"
        params: list = [list(run_ids), DIAGNOSTIC_PATTERN, target]
        where = ""
    else:
        diagnostic = "SELECT run_id, max(step) AS step, name, avg(value) AS value"
        params = [list(run_ids), DIAGNOSTIC_PATTERN, target, *window]
        where = " AND step BETWEEN ? AND ?"
    return reader.query(
        f"""
        {diagnostic} FROM metrics
        WHERE {_IN_RUNS} AND regexp_matches(name, ?) AND name <> ?{where}
        GROUP BY run_id, name
        UNION ALL
        SELECT run_id, max(step), name, arg_max(value, step) FROM metrics
        WHERE {_IN_RUNS} AND name = ? GROUP BY run_id, name
        ORDER BY run_id, name
        """,
        [*params, list(run_ids), target],
    )


def final_by_axes(reader: StoreReader, run_ids: Sequence[str], metric: str, axis_a: str,
                  axis_b: str | None, apart: Sequence[str] = ()) -> pd.DataFrame:
    """Replicate mean, sample std and count of each run's final ``metric`` per grid
    point of two dotted config paths (``axis_b`` None: one axis). Runs that differ on a
    path of ``apart`` are never pooled: each combination of their values is its own
    cell. Columns a, b, apart (the ``apart`` values, a list), mean, spread,
    replicates; config values as text, ``(absent)`` for a path a config lacks."""
    b_path = json_path(axis_b) if axis_b else None
    value = "coalesce(json_extract_string(r.config, {}), '(absent)')"
    return reader.query(
        f"""
        WITH final AS ({_FINAL})
        SELECT {value.format('?')} AS a,
               CASE WHEN ? IS NULL THEN '' ELSE {value.format('?')} END AS b,
               list_transform(json_extract_string(r.config, ?::TEXT[]),
                              lambda v: coalesce(v, '(absent)')) AS apart,
               avg(f.value) AS mean, stddev_samp(f.value) AS spread, count(*) AS replicates
        FROM runs r JOIN final f USING (run_id) GROUP BY ALL ORDER BY a, b, apart
        """,
        [metric, list(run_ids), json_path(axis_a), b_path, b_path,
         [json_path(path) for path in apart]],
    )


def finals(reader: StoreReader, run_ids: Sequence[str], metric: str) -> pd.DataFrame:
    """Each run's final ``metric``: columns run_id, value (runs without one left out)."""
    return reader.query(f"{_FINAL} ORDER BY run_id", [metric, list(run_ids)])


def slip_sweep(reader: StoreReader, run_ids: Sequence[str], metric: str) -> pd.DataFrame:
    """FrozenLake runs' final ``metric`` by slip probability and filter setting:
    columns slip, filtering, mean, spread (sample std over replicates), replicates."""
    return reader.query(
        f"""
        WITH final AS ({_FINAL}), cells AS (
            SELECT coalesce(TRY_CAST(json_extract_string(r.config, '$.env.options.slip')
                                     AS DOUBLE), 0.0) AS slip,
                   CASE WHEN json_extract_string(r.config, '$.filter.name') = 'none'
                        THEN 'no filter'
                        ELSE json_extract_string(r.config, '$.filter.name') || ' '
                             || json_extract_string(r.config, '$.filter.rho') END AS filtering,
                   f.value
            FROM runs r JOIN final f USING (run_id)
            WHERE json_extract_string(r.config, '$.env.name') = 'frozenlake'
        )
        SELECT slip, filtering, avg(value) AS mean, stddev_samp(value) AS spread,
               count(*) AS replicates
        FROM cells GROUP BY slip, filtering ORDER BY filtering, slip
        """,
        [metric, list(run_ids)],
    )


def _phase_sql(step: str, last: str) -> str:
    """Early / middle / late: thirds of the steps 0..last."""
    return f"list_extract(?::TEXT[], least(2, floor(3 * {step} / ({last} + 1)))::INT + 1)"


def reward_histogram(reader: StoreReader, run_ids: Sequence[str], bins: int = 20) -> pd.DataFrame:
    """Prompt groups per run, phase, bin of their mean return, and whether the G returns
    differ: columns run_id, phase, reward_bin, reward_bin_end, spread, prompts."""
    return reader.query(
        f"""
        WITH g AS (
            SELECT run_id, step, reward_mean, reward_variance FROM groups
            WHERE {_IN_RUNS} AND reward_mean IS NOT NULL
        ), span AS (SELECT run_id, max(step) AS last FROM g GROUP BY run_id),
        bounds AS (
            SELECT min(reward_mean) AS lo,
                   greatest(max(reward_mean) - min(reward_mean), 1e-9) / ? AS width FROM g
        )
        SELECT g.run_id, {_phase_sql('g.step', 'span.last')} AS phase,
               bounds.lo + least(? - 1, floor((g.reward_mean - bounds.lo) / bounds.width))
                     * bounds.width AS reward_bin,
               reward_bin + bounds.width AS reward_bin_end,
               CASE WHEN g.reward_variance > 0 THEN 'returns differ' ELSE 'all returns equal'
                    END AS spread,
               count(*) AS prompts
        FROM g JOIN span USING (run_id), bounds
        GROUP BY ALL ORDER BY g.run_id, phase, reward_bin
        """,
        [list(run_ids), bins, list(PHASES), bins],
    )


def reward_shares(reader: StoreReader, run_ids: Sequence[str]) -> pd.DataFrame:
    """Mean share of hard / mixed / easy prompts per run and phase, from the
    ``reward/*_share`` diagnostics: columns run_id, phase, kind, share."""
    return reader.query(
        f"""
        WITH m AS (
            SELECT run_id, step, split_part(split_part(name, '/', 2), '_', 1) AS kind, value
            FROM metrics WHERE {_IN_RUNS}
              AND name IN ('reward/hard_share', 'reward/mixed_share', 'reward/easy_share')
        ), span AS (SELECT run_id, max(step) AS last FROM m GROUP BY run_id)
        SELECT m.run_id, {_phase_sql('m.step', 'span.last')} AS phase, kind,
               avg(value) AS share
        FROM m JOIN span USING (run_id) GROUP BY ALL ORDER BY m.run_id, phase, kind
        """,
        [list(run_ids), list(PHASES)],
    )


def grad_norms(reader: StoreReader, run_ids: Sequence[str], norm: str) -> pd.DataFrame:
    """Mean over steps of ``grad/{bucket}/{term}/{norm}``: columns run_id, bucket, term,
    value, steps."""
    return reader.query(
        f"""
        SELECT run_id, split_part(name, '/', 2) AS bucket, split_part(name, '/', 3) AS term,
               avg(value) AS value, count(*) AS steps
        FROM metrics
        WHERE {_IN_RUNS} AND name LIKE 'grad/%' AND split_part(name, '/', 4) = ?
        GROUP BY ALL ORDER BY run_id, bucket, term
        """,
        [list(run_ids), norm],
    )


def events(reader: StoreReader, run_ids: Sequence[str], kind: str | None = None) -> pd.DataFrame:
    """Events of the runs (optionally one kind): run_id, step, kind, message, at."""
    kinds = "" if kind is None else " AND kind = ?"
    params = [list(run_ids)] + ([] if kind is None else [kind])
    return reader.query(
        f'SELECT run_id, step, kind, message, "at" FROM events WHERE {_IN_RUNS}{kinds}'
        " ORDER BY run_id, step, event_id",
        params,
    )


def rollout_steps(reader: StoreReader, run_id: str) -> list[int]:
    if not reader.has_table("rollouts"):
        return []
    frame = reader.query(
        "SELECT DISTINCT step FROM rollouts WHERE run_id = ? ORDER BY step", [run_id]
    )
    return [int(step) for step in frame["step"]]


def rollouts(reader: StoreReader, run_id: str, step: int) -> pd.DataFrame:
    """The sampled turns of one step: prompt_index, sample_index, turn, prompt,
    reasoning, action, reward and images (the PNG pictures the prompt showed, a list of
    bytes; empty for text, and in a store from before schema 7, which the app reads as it
    is)."""
    images = "images" if "images" in reader.columns("rollouts") else "[]::BLOB[] AS images"
    frame = reader.query(
        f"SELECT prompt_index, sample_index, turn, prompt, reasoning, action, reward, {images}"
        " FROM rollouts WHERE run_id = ? AND step = ? ORDER BY sample_index, prompt_index, turn",
        [run_id, step],
    )
    frame["images"] = [[bytes(png) for png in pictures] for pictures in frame["images"]]
    return frame


def configs(reader: StoreReader, run_ids: Sequence[str]) -> pd.DataFrame:
    """run_id, config (JSON text), plugins (JSON text), git_commit and environment (the
    reproducibility record, JSON text; NULL for runs stored before it existed)."""
    environment = "environment" if "environment" in reader.columns("runs") else "NULL AS environment"
    return reader.query(
        f"SELECT run_id, config, plugins, git_commit, {environment} FROM runs"
        f" WHERE {_IN_RUNS} ORDER BY run_id",
        [list(run_ids)],
    )


def regimes(reader: StoreReader, run_ids: Sequence[str]) -> dict[str, str]:
    """Run id -> the reasoning regimes it entered, each with its first step
    (mirage.core.analysis.signature; 'not measured' for a run without MI checks)."""
    names = signature.metric_names()
    frame = reader.query(
        f"SELECT run_id, step, name, value FROM metrics WHERE {_IN_RUNS}"
        " AND list_contains(?::TEXT[], name) ORDER BY run_id, step", [list(run_ids), names])
    found = {run_id: "not measured" for run_id in run_ids}
    for run_id, rows in frame.groupby("run_id"):
        checks = signature.checks_from_rows(rows[["step", "name", "value"]].itertuples(index=False))
        found[run_id] = signature.describe(checks)
    return found

"""The study's compact results: export a store's runs of one experiment to Parquet files
(DuckDB's EXPORT DATABASE), restore them into a store the app can open, and read them
as pandas frames for the report.

The export holds every table of the run store for those runs (config, per-step metrics,
per-group rows, events, stored rollouts), so ``core app`` shows the study exactly as
the runs wrote it, and ``core report`` re-renders docs/reproduction.md without re-running.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import duckdb
import pandas as pd

from mirage.core.config.run_config import AlgorithmConfig
from mirage.core.store.run_store import RunStore

STUDY = "reproduction"
POWERED = "reproduction_powered"  # the same findings with 5 paired seeds; supersedes STUDY
COLLAPSE = "collapse"
CALIBRATION = "collapse_calibration"
# issue #32: the search for template collapse, the regulariser share before the format
# breaks, and the study in the chosen regime
TEMPLATE_CALIBRATION = "template_calibration"
TEMPLATE_CALIBRATION_LR = "template_calibration_lr"
TEMPLATE_CALIBRATION_KL = "template_calibration_kl"
GRADIENTS = "collapse_gradients"
TEMPLATE = "template_collapse"
VISUAL = "visual"  # issue #42: exported to its own folder beside the study's (results/visual)
# issue #43: the search for a regime where the paper's causal chain can act, and the study
# in it, exported together to results/mechanism
MECHANISM_CALIBRATION = "mechanism_calibration"
MECHANISM = "mechanism"
# the folders beside results/reproduction read with it: results/visual holds `visual`,
# results/mechanism both of issue #43's experiments
BESIDE = (VISUAL, MECHANISM)
# the registry experiments `core report` reads; --from-store exports those present
STUDY_EXPERIMENTS = (POWERED, STUDY, COLLAPSE, CALIBRATION, TEMPLATE_CALIBRATION,
                     TEMPLATE_CALIBRATION_LR, TEMPLATE_CALIBRATION_KL, GRADIENTS, TEMPLATE)


def findings_experiment(runs: "pd.DataFrame") -> str:
    """The experiment whose runs the findings are measured on: the powered re-run once the
    results hold it, else the original study. ``runs``: a study's run labels."""
    return POWERED if (runs["experiment"] == POWERED).any() else STUDY


def export_study(source: Path | Sequence[Path], target: Path,
                 experiments: Sequence[str] = (STUDY,)) -> dict[str, int]:
    """Write the finished runs of each of ``experiments`` in the store ``source`` (or in
    each of several stores) to the folder ``target`` (replaced) as Parquet plus DuckDB's
    schema/load scripts; return the run count per experiment (0 for one no store holds).
    Raises ValueError when no store has a finished run of any of them."""
    sources = [source] if isinstance(source, Path) else list(source)
    with tempfile.TemporaryDirectory() as scratch:
        compact = Path(scratch) / "study.duckdb"
        store = RunStore(compact)
        counts = {name: sum(len(store.import_runs(path, experiment=name)) for path in sources)
                  for name in experiments}
        if not any(counts.values()):
            raise ValueError(", ".join(str(path) for path in sources) + " hold no finished run "
                             "of experiment " + " or ".join(repr(name) for name in experiments))
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(compact))
        try:
            con.execute(f"EXPORT DATABASE '{target}' (FORMAT parquet, COMPRESSION zstd)")
        finally:
            con.close()
    return counts


# Where a checkout keeps the committed study, relative to the repository root.
STUDY_RESULTS = Path("results") / "reproduction"


def shipped_study() -> Path:
    """The committed study shipped with the package (package data: in a checkout, a
    link to the repository's results/reproduction)."""
    return Path(str(files("mirage") / "study" / "reproduction"))


def default_results() -> Path:
    """``./results/reproduction`` when the current directory holds an exported study
    (a checkout, or a study the user exported there), else the shipped one."""
    return STUDY_RESULTS if (STUDY_RESULTS / "schema.sql").exists() else shipped_study()


def restore_study(results: Path, db: Path) -> Path:
    """Rebuild a run store file ``db`` (must not exist) from an exported ``results``
    folder, e.g. for ``core app --db``."""
    if not (results / "schema.sql").exists():
        raise FileNotFoundError(
            f"{results} is not an exported study (no schema.sql); pass --results FOLDER, a "
            f"folder `core report --from-store` wrote, or leave --results out for the study "
            f"shipped with the package ({shipped_study()})")
    if db.exists():
        raise FileExistsError(f"{db} exists; restore into a new file")
    con = duckdb.connect(str(db))
    try:
        con.execute(f"IMPORT DATABASE '{results}'")
    finally:
        con.close()
    return db


@dataclass(frozen=True)
class Study:
    """The study as frames. ``runs``: one row per run with its experiment and its
    config's labels; ``metrics``: long format (run_id, step, name, value), with the reward
    variance's per-step mean and std derived from the per-group rows where not logged."""

    runs: pd.DataFrame
    metrics: pd.DataFrame
    rollouts: pd.DataFrame | None = None  # the stored first-turn samples, when read
    # the runs that stopped themselves before their last step (a stop rule fired): their
    # labels with ``last_step`` and ``reason``, and their metrics; kept apart from ``runs``
    # and ``metrics`` so that no endpoint or pairing takes a shorter run for a finished one
    stopped: pd.DataFrame | None = None
    stopped_metrics: pd.DataFrame | None = None

    def of(self, experiment: str) -> "Study":
        """Only the runs (and their metrics and rollouts) of registry experiment ``experiment``."""
        runs = self.runs[self.runs["experiment"] == experiment].reset_index(drop=True)
        rollouts = None if self.rollouts is None else self.rollouts[self.rollouts["run_id"].isin(runs["run_id"])]
        stopped = stopped_metrics = None
        if self.stopped is not None:
            stopped = self.stopped[self.stopped["experiment"] == experiment].reset_index(drop=True)
            stopped_metrics = self.stopped_metrics[self.stopped_metrics["run_id"].isin(stopped["run_id"])]
        return Study(runs, self.metrics[self.metrics["run_id"].isin(runs["run_id"])], rollouts,
                     stopped, stopped_metrics)

    def series(self, name: str) -> pd.DataFrame:
        """``name`` per run and step, joined with the run labels."""
        rows = self.metrics[self.metrics["name"] == name]
        return rows.merge(self.runs, on="run_id")


def read_study(results: Path) -> Study:
    """Load an exported study folder (Parquet) without a store file."""
    runs = pd.read_parquet(results / "runs.parquet")
    metrics = pd.read_parquet(results / "metrics.parquet", columns=["run_id", "step", "name", "value"])
    labels = pd.DataFrame([run_labels(json.loads(c)) for c in runs["config"]])
    labels.insert(0, "run_id", runs["run_id"].to_numpy())
    labels.insert(1, "experiment", runs["experiment"].to_numpy())
    finished = (runs["status"] == "finished").to_numpy()
    stopped = stopped_metrics = None
    if not finished.all():  # the export keeps finished runs and those a stop rule ended
        stopped = labels[~finished].assign(last_step=runs["last_step"].to_numpy()[~finished],
                                           reason=runs["error"].to_numpy()[~finished])
        stopped_metrics = metrics[metrics["run_id"].isin(stopped["run_id"])].dropna(subset=["value"])
        labels = labels[finished].reset_index(drop=True)
        metrics = metrics[metrics["run_id"].isin(labels["run_id"])]
    rollouts = (pd.read_parquet(results / "rollouts.parquet",
                                columns=["run_id", "step", "prompt_index", "sample_index", "turn",
                                         "reasoning", "action"])
                if (results / "rollouts.parquet").exists() else None)
    if rollouts is not None:
        rollouts = rollouts[rollouts["run_id"].isin(labels["run_id"])]
    if (results / "groups.parquet").exists():
        metrics = with_reward_variance(metrics, pd.read_parquet(
            results / "groups.parquet", columns=["run_id", "step", "reward_variance"]))
    return Study(labels, metrics.dropna(subset=["value"]), rollouts, stopped, stopped_metrics)


VARIANCE_MEAN, VARIANCE_STD = "reward/variance_mean", "reward/variance_std"


def with_reward_variance(metrics: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    """``metrics`` with ``reward/variance_mean`` and ``reward/variance_std`` (the mean and
    population std over a step's groups of the in-group reward variance, docs/metrics.md)
    derived from the stored per-group rows for the runs that predate those metrics; the
    same numbers the run loop logs, from the same groups before filtering."""
    logged = set(metrics.loc[metrics["name"] == VARIANCE_MEAN, "run_id"])
    groups = groups[~groups["run_id"].isin(logged)].dropna(subset=["reward_variance"])
    if groups.empty:
        return metrics
    per_step = groups.groupby(["run_id", "step"])["reward_variance"]
    derived = pd.concat([per_step.mean().rename(VARIANCE_MEAN), per_step.std(ddof=0).rename(VARIANCE_STD)],
                        axis=1).reset_index().melt(id_vars=["run_id", "step"], var_name="name")
    return pd.concat([metrics, derived[["run_id", "step", "name", "value"]]], ignore_index=True)


def read_with_visual(results: Path) -> Study:
    """``results`` with the runs of the later studies added where their folders sit beside
    it (``results/visual`` and ``results/mechanism`` next to ``results/reproduction``)."""
    study = read_study(results)
    for folder in BESIDE:
        beside = results.parent / folder
        if beside.resolve() != results.resolve() and (beside / "runs.parquet").exists():
            study = _joined(study, read_study(beside))
    return study


def _joined(study: Study, other: Study) -> Study:
    rollouts = (None if study.rollouts is None or other.rollouts is None
                else pd.concat([study.rollouts, other.rollouts], ignore_index=True))
    stopped = [part for part in (study.stopped, other.stopped) if part is not None]
    stopped_metrics = [part for part in (study.stopped_metrics, other.stopped_metrics) if part is not None]
    return Study(pd.concat([study.runs, other.runs], ignore_index=True),
                 pd.concat([study.metrics, other.metrics], ignore_index=True), rollouts,
                 pd.concat(stopped, ignore_index=True) if stopped else None,
                 pd.concat(stopped_metrics, ignore_index=True) if stopped_metrics else None)


def run_labels(config: dict) -> dict:
    """What the report groups runs by, read from a stored config."""
    flt = config["filter"]
    if flt["name"] == "none":
        filter_label = "none"
    else:
        filter_label = f"{flt['name'].replace('_', '-')} {flt['rho']:g}"
        if flt.get("keep") == "smallest":
            filter_label += " smallest"
    algo = config["algorithm"]
    provoked = any(algo[name] != AlgorithmConfig.model_fields[name].default
                   for name in ("lr", "entropy_coef"))
    return {
        "env": config["env"]["name"],
        "observation": config["env"]["options"].get("observation", "text"),
        "filter": filter_label,
        # top-p's mass rule: linear (the default) or softmax over the scores (RAGEN's main table)
        "filter_mode": flt.get("options", {}).get("mode", "linear"),
        "slip": float(config["env"]["options"].get("slip", 0.0)),
        "regime": "provoked" if provoked else "default",
        "lr": algo["lr"],
        "entropy_coef": algo["entropy_coef"],
        "kl_coef": algo.get("kl_coef", 0.0),
        "max_grad_norm": algo.get("max_grad_norm", AlgorithmConfig.model_fields["max_grad_norm"].default),
        "algorithm": algo["name"],
        # the KL reference: the starting policy, or one fine-tuned on other demonstrations
        "reference": ", ".join(f"{key}={value}" for key, value in sorted(
            config["model"].get("options", {}).get("reference_env_options", {}).items())) or "starting policy",
        # the environment options other than slip, e.g. "generic_style=grammar"
        "env_options": ", ".join(f"{key}={value}" for key, value in sorted(config["env"]["options"].items())
                                 if key != "slip"),
        "seed": config["seed"],
        "steps": config["steps"],
        "prompts": config["rollout"]["prompts"],
        "group_size": config["rollout"]["group_size"],
        "validation_episodes": config["validation"]["episodes"],
        "threads": config.get("threads", 1),
    }

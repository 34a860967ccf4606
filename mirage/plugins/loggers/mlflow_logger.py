"""MLflow: one MLflow run per MIRAGE run (tag ``mirage.run_id``), metrics keyed by step."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.components import Logger
from mirage.plugins.loggers.library import missing_library

RUN_ID_TAG = "mirage.run_id"
# How a MIRAGE run's status ends its MLflow run.
TERMINAL_STATUS = {"finished": "FINISHED", "stopped": "KILLED", "failed": "FAILED"}


def mlflow_name(name: str) -> str:
    """A metric or parameter name MLflow accepts: it refuses ``@`` (``recall@2`` becomes
    ``recall_at_2``); every other character of a MIRAGE metric name is allowed."""
    return name.replace("@", "_at_")


def flat_params(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config sections as dotted ``section.key`` parameters (values as JSON)."""
    out: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            out |= flat_params(value, f"{prefix}{key}.")
        else:
            out[mlflow_name(f"{prefix}{key}")] = json.dumps(value)
    return out


class MlflowLogger(Logger):
    """Logs every stored metric with ``MlflowClient.log_batch``."""

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")

        tracking_uri: str | None = Field(
            None, description="any MLflow tracking URI (None: sqlite:///STORE_FOLDER/mlflow.db, "
            "MLflow's recommended local store; its file store, file:PATH, also works with "
            "MLFLOW_ALLOW_FILE_STORE=true)"
        )
        experiment: str = "mirage"

    def __init__(self, config: RunConfig, options: Options) -> None:
        super().__init__(config, options)
        self._client: Any = None
        self._run_id = ""

    @classmethod
    def missing_requirement(cls) -> str | None:
        return missing_library("mlflow", "mlflow")

    def tracking_uri(self, store_dir: Path) -> str:
        return self.options.tracking_uri or f"sqlite:///{store_dir.resolve() / 'mlflow.db'}"

    def open(self, run_id: str, config: RunConfig, store_dir: Path, first_step: int) -> None:
        from mlflow.entities import Param, RunStatus
        from mlflow.tracking import MlflowClient

        client = self._client = MlflowClient(tracking_uri=self.tracking_uri(store_dir))
        experiment = client.get_experiment_by_name(self.options.experiment)
        experiment_id = (experiment.experiment_id if experiment
                         else client.create_experiment(self.options.experiment))
        found = client.search_runs([experiment_id], f"tags.`{RUN_ID_TAG}` = '{run_id}'")
        if found:  # a resume continues the MLflow run (its parameters are already there)
            self._run_id = found[0].info.run_id
            client.update_run(self._run_id, RunStatus.to_string(RunStatus.RUNNING))
            return
        self._run_id = client.create_run(experiment_id, run_name=run_id,
                                         tags={RUN_ID_TAG: run_id}).info.run_id
        params = [Param(k, v) for k, v in flat_params(config.model_dump(mode="json")).items()]
        for start in range(0, len(params), 100):  # MLflow's most parameters per batch
            client.log_batch(self._run_id, params=params[start:start + 100])

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self._run_id, metrics=[
            Metric(mlflow_name(name), value, now, step) for name, value in metrics.items()
        ])

    def close(self, status: str) -> None:
        self._client.set_terminated(self._run_id, TERMINAL_STATUS.get(status, "FAILED"))

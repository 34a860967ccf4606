"""Weights & Biases: one W&B run per MIRAGE run, with the same id, history keyed by step."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field

from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.components import Logger
from mirage.plugins.loggers.library import missing_library


class WandbLogger(Logger):
    """Logs every stored metric with ``run.log(metrics, step=step)``."""

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")

        project: str = "mirage"
        entity: str | None = None
        mode: Literal["offline", "online"] = Field(
            "offline", description="offline needs no network or account; upload later with "
            "`wandb sync DIR/wandb/offline-run-*`"
        )
        dir: str | None = Field(
            None, description="where W&B writes its wandb/ folder (None: the run store's folder)"
        )
        tags: list[str] = Field(default_factory=list)

    def __init__(self, config: RunConfig, options: Options) -> None:
        super().__init__(config, options)
        self._run: Any = None

    @classmethod
    def missing_requirement(cls) -> str | None:
        return missing_library("wandb", "wandb")

    def open(self, run_id: str, config: RunConfig, store_dir: Path, first_step: int) -> None:
        import wandb

        options = self.options
        self._run = wandb.init(
            project=options.project, entity=options.entity, mode=options.mode,
            dir=str(options.dir or store_dir), id=run_id, name=run_id, tags=options.tags,
            config=config.model_dump(mode="json"),
            resume="allow",  # a resumed MIRAGE run continues its W&B run
            reinit="create_new",  # runs of one process (a sweep) each get their own
            # the progress bar is all a run prints; not worth mirroring
            settings=wandb.Settings(console="off"),
        )

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self, status: str) -> None:
        self._run.finish(exit_code=0 if status == "finished" else 1)

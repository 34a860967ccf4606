"""TensorBoard: event files in LOG_DIR/RUN_ID, one scalar series per metric."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.components import Logger
from mirage.plugins.loggers.library import missing_library


class TensorBoardLogger(Logger):
    """Logs every stored metric with torch's ``SummaryWriter.add_scalar``, as a float64
    tensor (``new_style``, ``double_precision``) so the event file holds the store's exact
    values, not float32 roundings of them."""

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")

        log_dir: str | None = Field(
            None, description="parent of the runs' event folders (None: STORE_FOLDER/tensorboard); "
            "point `tensorboard --logdir` at it"
        )

    def __init__(self, config: RunConfig, options: Options) -> None:
        super().__init__(config, options)
        self._writer: Any = None

    @classmethod
    def missing_requirement(cls) -> str | None:
        return missing_library("tensorboard", "tensorboard")

    def run_dir(self, store_dir: Path, run_id: str) -> Path:
        root = Path(self.options.log_dir) if self.options.log_dir else store_dir / "tensorboard"
        return root / run_id

    def open(self, run_id: str, config: RunConfig, store_dir: Path, first_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # A resume recomputes the steps after its checkpoint: purge_step hides the
        # earlier attempt's values at those steps.
        self._writer = SummaryWriter(log_dir=str(self.run_dir(store_dir, run_id)),
                                     purge_step=first_step or None)
        if not first_step:
            self._writer.add_text("config", f"```\n{json.dumps(config.model_dump(mode='json'), indent=2)}\n```")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, step, new_style=True, double_precision=True)
        self._writer.flush()  # a reader (or a crash) sees every stored step

    def close(self, status: str) -> None:
        self._writer.close()

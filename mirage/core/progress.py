"""The progress line of a run: success, mean reward and kept ratio per step."""

from __future__ import annotations

from tqdm import tqdm


class Progress:
    """A tqdm bar over iterations; silent when disabled."""

    def __init__(self, total: int, initial: int, enabled: bool, run_id: str):
        self._bar = tqdm(total=total, initial=initial, disable=not enabled, desc=run_id, unit="step",
                         dynamic_ncols=True)
        self._last_val: float | None = None

    def update(self, step: int, metrics: dict[str, float]) -> None:
        if "val/success" in metrics:
            self._last_val = metrics["val/success"]
        shown = {
            "success": metrics.get("train/success"),
            "reward": metrics.get("train/return"),
            "kept": metrics.get("filter/kept_ratio"),
            "val": self._last_val,
        }
        self._bar.set_postfix({k: f"{v:.2f}" for k, v in shown.items() if v is not None}, refresh=False)
        if step:
            self._bar.update(1)
        else:
            self._bar.refresh()

    def close(self) -> None:
        self._bar.close()

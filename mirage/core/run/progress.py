"""The progress line of a run: success, mean reward and kept ratio per step."""

from __future__ import annotations

import sys

from tqdm import tqdm


class Progress:
    """A tqdm bar over iterations; silent when disabled."""

    def __init__(self, total: int, initial: int, enabled: bool, run_id: str,
                 unsafe: str | None = None):
        """``unsafe``: a warning printed first and flagged (``UNSAFE``) on every line."""
        self._unsafe = unsafe is not None
        if unsafe is not None:
            self.warn(unsafe)
        self._bar = tqdm(total=total, initial=initial, disable=not enabled, desc=run_id, unit="step",
                         file=sys.stderr,
                         dynamic_ncols=True, postfix=self._flags() or None)
        self._last_val: float | None = None
        self._alarm = False

    def update(self, step: int, metrics: dict[str, float]) -> None:
        if "val/success" in metrics:
            self._last_val = metrics["val/success"]
        shown = {
            "success": metrics.get("train/success"),
            "reward": metrics.get("train/return"),
            "kept": metrics.get("filter/kept_ratio"),
            "val": self._last_val,
        }
        postfix = {k: f"{v:.2f}" for k, v in shown.items() if v is not None}
        if "alarm/collapse" in metrics:  # on from a step the alarm fires until a check it does not
            self._alarm = metrics["alarm/collapse"] == 1.0
        if self._alarm:
            postfix["alarm"] = "COLLAPSE"
        postfix |= self._flags()
        self._bar.set_postfix(postfix, refresh=False)
        if step:
            self._bar.update(1)
        else:
            self._bar.refresh()

    def _flags(self) -> dict[str, str]:
        return {"UNSAFE": "no-isolation"} if self._unsafe else {}

    def warn(self, message: str) -> None:
        """Print ``message`` above the bar (to stderr, shown even without a bar)."""
        tqdm.write(f"warning: {message}", file=sys.stderr)

    def close(self) -> None:
        self._bar.close()

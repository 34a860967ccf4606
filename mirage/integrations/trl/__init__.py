"""MIRAGE inside TRL's GRPOTrainer (docs/integrations.md, section TRL).

:class:`MirageGRPOTrainer` is a GRPOTrainer that, every ``every`` steps, cross-scores the
step's reasonings under the step's prompts with the trainer's own model and logs the MI
proxies through TRL's logger, and applies any registered MIRAGE filter (``top_p``,
``top_k``, ...) to the step's groups. :class:`MirageOptions` holds its settings.

Needs the ``trl`` extra: ``pip install 'mirage-rl[trl]'`` (pinned to the TRL release whose
private methods the trainer overrides, :mod:`mirage.integrations.trl.trainer`).
"""

from __future__ import annotations

try:
    import trl as _trl  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised without the extra only
    raise ImportError(
        "mirage.integrations.trl needs TRL; install the extra: pip install 'mirage-rl[trl]'"
    ) from error

from mirage.integrations.trl.options import MirageOptions
from mirage.integrations.trl.trainer import MirageGRPOTrainer

__all__ = ["MirageGRPOTrainer", "MirageOptions"]

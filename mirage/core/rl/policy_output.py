"""What a policy's scoring returns: per-token outputs of a batch of responses, and every
response scored under every context. The backend contract returns them and the training
seam's loss recipes read them; they live apart so that neither imports the other for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class PolicyOutput:
    """Per-token outputs for a padded batch of responses, shapes ``[B, L]``.

    ``logprobs`` carries gradient when produced by :meth:`Backend.forward`; ``mask`` is
    1 on response tokens and 0 on padding.
    """

    logprobs: "torch.Tensor"
    entropy: "torch.Tensor"
    mask: "torch.Tensor"


@dataclass
class CrossScores:
    """Every response scored under every context, shapes ``[R, C]`` (float64, no gradient):
    ``logprobs[r, c]`` is the summed log-prob of response r after context c, ``entropy[r, c]``
    the summed per-token policy entropy along it."""

    logprobs: "torch.Tensor"
    entropy: "torch.Tensor"

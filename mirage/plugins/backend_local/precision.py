"""Where the local backend runs (``model.device``) and in which precision (``model.dtype``).

bfloat16 is mixed precision, as veRL's FSDP actor runs it: the weights and the AdamW
state stay float32 and the model's matrix products run in bfloat16 under autocast. Pure
bfloat16 weights would lose the updates: bfloat16 keeps 8 bits of mantissa, so an AdamW
step of about lr = 1e-6 on a weight near 1e-2 (a relative change of 1e-4, under bfloat16's
resolution of 2^-8) rounds back to the same weight. Log-probs, entropies, values and
losses are computed from float32 logits and hidden states outside autocast.
"""

from __future__ import annotations

import contextlib

import torch

BFLOAT16 = "bfloat16"


def device_problem(setting: str) -> str | None:
    """Why ``model.device`` cannot be honoured on this machine, or None."""
    if setting == "cuda" and not torch.cuda.is_available():
        return "model.device is cuda but no CUDA GPU is visible here (torch.cuda.is_available() is False)"
    return None


def resolve_device(setting: str) -> torch.device:
    """``auto``: cuda when a GPU is visible, else cpu."""
    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(setting)


def compute(device: torch.device, dtype: str) -> contextlib.AbstractContextManager:
    """The context model calls run in: bfloat16 autocast on ``device``, or nothing at all
    for float32 (so a float32 run computes exactly what it did before the option existed)."""
    if dtype == BFLOAT16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def facts(device: torch.device, dtype: str, model: torch.nn.Module) -> dict[str, str]:
    """What the run actually used, for the backend facts."""
    used = {"device": str(device), "dtype": dtype,
            "weights_dtype": str(next(model.parameters()).dtype).removeprefix("torch.")}
    if device.type == "cuda":
        used["device_name"] = torch.cuda.get_device_name(device)
    return used

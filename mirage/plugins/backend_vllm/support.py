"""What the vllm backend checks before any work: vLLM is importable, this process sees the
GPUs the engine is to span, and vLLM can run the model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from mirage.core.config.run_config import RunConfig

# vLLM's CPU attention kernels take head sizes of 32 and up (issue #17; vLLM's CPU backend
# lists its supported sizes, all >= 32).
MIN_CPU_HEAD_SIZE = 32
INSTALL_HINT = "pip install 'mirage-rl[gpu]' on a GPU machine (docs/gpu.md)"


def vllm_missing() -> str | None:
    """Why ``import vllm`` would fail, or None."""
    if importlib.util.find_spec("vllm") is None:
        return f"--backend vllm needs vLLM, which is not installed: {INSTALL_HINT}"
    return None


def head_size(config: RunConfig, options) -> int | None:
    """The policy's attention head size: the tiny model's hidden / heads (``options``, the
    backend's), a local checkpoint's from its config.json; None when unknown (a hub id not
    downloaded yet)."""
    model = config.model
    if not model.path:
        return options.hidden // options.heads
    settings = Path(model.path).expanduser() / "config.json"
    if not settings.is_file():
        return None
    data = json.loads(settings.read_text())
    if data.get("head_dim"):
        return int(data["head_dim"])
    if data.get("hidden_size") and data.get("num_attention_heads"):
        return int(data["hidden_size"]) // int(data["num_attention_heads"])
    return None


def unsupported_model(config: RunConfig, options, *, on_gpu: bool) -> str | None:
    """Why vLLM cannot run the configured policy here, or None."""
    size = head_size(config, options)
    if not on_gpu and size is not None and size < MIN_CPU_HEAD_SIZE:
        where = (f"--model {config.model.path}" if config.model.path
                 else f"the tiny model (hidden {options.hidden} / heads {options.heads})")
        return (f"--backend vllm: {where} has attention head size {size}; vLLM on CPU needs "
                f"at least {MIN_CPU_HEAD_SIZE} (raise model.options.hidden or lower model.options.heads, or use a GPU)")
    return None


def too_few_gpus(tensor_parallel_size: int, *, gpus: int) -> str | None:
    """Why one engine over ``tensor_parallel_size`` GPUs cannot start in a process that sees
    ``gpus`` of them (under ``model.parallel: ddp`` a rank sees only its own), or None."""
    if tensor_parallel_size <= gpus or tensor_parallel_size == 1:
        return None
    seen = "this machine has none" if gpus == 0 else f"this process sees {gpus}"
    return (f"--backend vllm: model.options.tensor_parallel_size {tensor_parallel_size} needs "
            f"{tensor_parallel_size} GPUs; {seen}")

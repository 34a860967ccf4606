"""What the benchmarks share: a run session built from partial config data, its policy
prepared (the warm start is cached under ~/.cache/mirage after its first build)."""

from __future__ import annotations

import statistics
import time

import torch

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.plugin_api.session import RunSession
from mirage.core.run.loop import cache_dir, open_session
from mirage.core.run.validate import build_config, validate_config


def prepared_session(data: dict) -> RunSession:
    """A session for the RunConfig built from ``data``, its backend prepared."""
    config = build_config(data)
    plugins = build_plugins()
    session = open_session(config, plugins, validate_config(config, plugins))
    session.backend.prepare(session.env_cls, cache_dir())
    return session


def matmul_rate(shape: tuple[int, int, int], repeats: int = 20, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of an ``[m, k] x [k, n]`` matmul in ``dtype`` (median of ``repeats``): the
    FLOP-bound limit the benchmarks compare their rates with."""
    m, k, n = shape
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    a @ b
    times = []
    for _ in range(repeats):
        mark = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - mark)
    return 2 * m * k * n / statistics.median(times)

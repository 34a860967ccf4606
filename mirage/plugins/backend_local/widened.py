"""Cross-scoring in float64 (``model.options.cross_score_dtype: float64``).

The MI proxies compare a reasoning's summed log-prob across prompts. In float32 a sum of
25-40 teacher-forced log-probs near -100 is off its exact value by up to about 5e-5 on the
shipped visual Sokoban policy, whichever way it is computed (each pair in full, or the
prefix tree of cross_scoring.py: the two differ by about 2e-5, each from the float64 value
by 3e-5 to 6e-5; docs/diagnostics.md). In float64 both ways agree with each other and with
the exact value to float64 rounding, at about twice the float32 time. The copy is made for
each call and dropped after it (11 ms for the tiny policy, about a second for a 135M
model), so it never goes stale and holds no memory between checks; rollouts and the
update never see it.
"""

from __future__ import annotations

import contextlib
import copy

import torch


@contextlib.contextmanager
def float64_policy(backend):
    """``backend.model`` is a float64 copy of the policy, and model calls run without
    autocast, for the duration."""
    policy = backend.model
    backend.model = copy.deepcopy(policy).to(torch.float64).eval()
    backend.widened = True
    try:
        yield backend.model
    finally:
        backend.model, backend.widened = policy, False

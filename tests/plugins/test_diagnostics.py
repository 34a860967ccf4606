"""The first-turn MI proxies on constructed score matrices (PAPER.md section 2)."""

import math

import torch

from mirage.plugins.diagnostics import mi_proxies


def test_entropy_identity_holds_exactly():
    torch.manual_seed(0)
    scores = -torch.rand(12, 4, dtype=torch.float64) * 20
    lengths = torch.randint(1, 9, (12,))
    owner = torch.arange(12) % 4
    m = mi_proxies(scores, lengths, owner)
    assert math.isclose(m["h_marg"], m["mi_est"] + m["h_cond"], rel_tol=0, abs_tol=1e-12)
    assert m["mi_est"] != 0.0


def test_input_dependent_reasoning_is_retrieved():
    owner = torch.tensor([0, 0, 1, 1, 2, 2])
    scores = torch.full((6, 3), -30.0, dtype=torch.float64)
    scores[torch.arange(6), owner] = -3.0
    m = mi_proxies(scores, torch.full((6,), 3), owner)
    assert m["retrieval_acc"] == 1.0
    assert m["retrieval_chance"] == 1 / 3
    # matched - marginal = -3 - (logsumexp([-3,-30,-30]) - log 3), per token over 3 tokens
    expected = (-3.0 - (math.log(math.exp(-3) + 2 * math.exp(-30)) - math.log(3))) / 3
    assert math.isclose(m["mi_est"], expected, rel_tol=1e-9)


def test_input_agnostic_reasoning_sits_at_chance_with_zero_mi():
    owner = torch.arange(8) % 4
    scores = torch.full((8, 4), -7.0, dtype=torch.float64)  # same likelihood under every prompt
    m = mi_proxies(scores, torch.full((8,), 5), owner)
    assert math.isclose(m["mi_est"], 0.0, abs_tol=1e-12)
    assert math.isclose(m["mi_seq_est"], 0.0, abs_tol=1e-12)
    assert m["retrieval_acc"] == 0.25  # ties resolve to column 0: one owner in four

"""GRPO's pieces on hand-made numbers, computed independently of veRL."""

import math

import pytest

from mirage.core.batch import Trajectory, Turn
from mirage.core.config import RunConfig
from mirage.plugins.algorithms import GRPO, token_weights


def _trajectory(prompt: int, ret: float) -> Trajectory:
    turn = Turn("x", "y", "z", "a", [], True, ret, [1], [2])
    return Trajectory(prompt_index=prompt, sample_index=0, seed=0, turns=[turn])


def test_grpo_advantage_is_group_normalised():
    # MEASURED.md: rewards [1,0,1,0 | 0,0,1,1] give +-0.866 (std-normalised, unbiased std).
    returns = [1, 0, 1, 0, 0, 0, 1, 1]
    trajectories = [_trajectory(i // 4, r) for i, r in enumerate(returns)]
    advantages = GRPO(RunConfig()).trajectory_advantages(trajectories).tolist()
    std = math.sqrt(sum((r - 0.5) ** 2 for r in [1, 0, 1, 0]) / 3)
    expected = [(r - 0.5) / (std + 1e-6) for r in returns]
    assert advantages == pytest.approx(expected, abs=1e-5)
    assert abs(advantages[0]) == pytest.approx(0.866, abs=1e-3)


def test_dr_grpo_style_advantage_without_std():
    config = RunConfig.model_validate({"algorithm": {"norm_adv_by_std": False}})
    trajectories = [_trajectory(0, r) for r in [1, 0, 1, 0]]
    assert GRPO(config).trajectory_advantages(trajectories).tolist() == pytest.approx([0.5, -0.5, 0.5, -0.5])


def test_token_weights_make_each_trajectory_count_once():
    lengths = [[3, 1], [4], [0]]  # two turns (4 tokens), one turn (4 tokens), empty
    w = token_weights(lengths, "seq-mean-token-mean")
    # Two non-empty trajectories, each of 4 tokens: every token weighs 1 / (2 * 4).
    assert w == pytest.approx([1 / 8, 1 / 8, 0.0])
    assert token_weights([[2], [6]], "seq-mean-token-mean") == pytest.approx([1 / 4, 1 / 12])
    assert token_weights([[2], [6]], "token-mean") == pytest.approx([1 / 8, 1 / 8])
    assert token_weights([[2], [6]], "seq-mean-token-sum") == pytest.approx([1 / 2, 1 / 2])
    assert token_weights([[2], [6]], "token-sum") == [1.0, 1.0]
    with pytest.raises(ValueError, match="valid: token-mean"):
        token_weights([[1]], "bogus")

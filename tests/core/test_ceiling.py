"""The demonstrators' retrieval ceiling (mirage/core/analysis/ceiling.py)."""

import pytest

from mirage.core.analysis.ceiling import retrieval_ceiling
from mirage.core.config.run_config import EnvConfig
from mirage.envs.frozenlake import FrozenLake
from mirage.envs.sokoban import Sokoban


@pytest.mark.parametrize("env_cls", [Sokoban, FrozenLake])
def test_default_reasoning_identifies_its_prompt_at_16_prompts(env_cls):
    ceiling = retrieval_ceiling(env_cls, env_cls.Options(), EnvConfig(name=env_cls.name),
                                prompts=16, batches=3, draws=150)
    assert ceiling.retrieval >= 0.85
    assert ceiling.chance == 1 / 16
    # the generic sentences (8% of turns) are what keeps it below 1
    assert 0.05 <= ceiling.ambiguous_share < 0.3


@pytest.mark.parametrize("env_cls", [Sokoban, FrozenLake])
def test_generic_reasoning_only_is_at_chance(env_cls):
    ceiling = retrieval_ceiling(env_cls, env_cls.Options(generic_share=1.0),
                                EnvConfig(name=env_cls.name), prompts=8, batches=3, draws=300)
    assert ceiling.ambiguous_share == 1.0
    assert abs(ceiling.retrieval - 1 / 8) < 0.05


def test_more_generic_reasoning_lowers_the_ceiling():
    low, high = (
        retrieval_ceiling(FrozenLake, FrozenLake.Options(generic_share=share),
                          EnvConfig(name="frozenlake"), prompts=8, batches=2, draws=150).retrieval
        for share in (0.0, 0.5)
    )
    assert low > 0.9 and high < low - 0.3

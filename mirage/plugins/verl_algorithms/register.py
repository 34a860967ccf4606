"""Registers PPO, GRPO, DAPO and Dr. GRPO (docs/algorithms.md).

The four share one assembly (:class:`PolicyGradient`); what makes each the textbook
algorithm is its preset of settings, ``ALGORITHM_PRESETS`` in ``mirage/core/config.py``,
resolved into the run's config (and so stored with the run).
"""

from __future__ import annotations

from mirage.core.hookspecs import hookimpl
from mirage.plugins.verl_algorithms.update import PolicyGradient


class PPO(PolicyGradient):
    """PPO: a critic, GAE (gamma = lambda = 1), value clipping 0.5, token-mean."""


class GRPO(PolicyGradient):
    """GRPO: group outcome advantage divided by the group std, seq-mean-token-mean."""


class DrGRPO(PolicyGradient):
    """Dr. GRPO: group outcome advantage without std normalisation, seq-mean-token-sum."""


class DAPO(PolicyGradient):
    """DAPO: clip-higher 0.2 / 0.28, token-mean, no KL, dynamic sampling, overlong penalty."""


@hookimpl
def mirage_register_algorithms(register):
    register("ppo", PPO)
    register("grpo", GRPO)
    register("dapo", DAPO)
    register("drgrpo", DrGRPO)

"""Registers PPO, GRPO, DAPO and Dr. GRPO, and the two advantage estimators they use
(docs/algorithms.md).

The four share one assembly (:class:`PolicyGradient`); what makes each the textbook
algorithm is its ``preset`` of settings, resolved into the run's config before it runs
(and so stored with the run). The estimators (``gae``, ``grpo``) fill the settings they
read that no preset chose.
"""

from __future__ import annotations

from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.plugins.verl_algorithms.estimators import GAE, GroupOutcome
from mirage.plugins.verl_algorithms.update import PolicyGradient


class PPO(PolicyGradient):
    """PPO: a critic, GAE (gamma = lambda = 1), value clipping 0.5, token-mean."""

    preset = {"adv_estimator": "gae", "loss_agg_mode": "token-mean"}


class GRPO(PolicyGradient):
    """GRPO: group outcome advantage divided by the group std, seq-mean-token-mean."""

    preset = {"adv_estimator": "grpo", "norm_adv_by_std": True, "loss_agg_mode": "seq-mean-token-mean"}


class DrGRPO(PolicyGradient):
    """Dr. GRPO: group outcome advantage without std normalisation, seq-mean-token-sum."""

    preset = {"adv_estimator": "grpo", "norm_adv_by_std": False, "loss_agg_mode": "seq-mean-token-sum"}


class DAPO(PolicyGradient):
    """DAPO: clip-higher 0.2 / 0.28, token-mean, no KL, dynamic sampling, overlong penalty."""

    preset = {
        "adv_estimator": "grpo",
        "norm_adv_by_std": True,
        "loss_agg_mode": "token-mean",
        "clip_ratio_high": 0.28,
        "dynamic_sampling": True,
        "overlong_penalty": 1.0,
    }


@hookimpl
def mirage_register_algorithms(register):
    register("ppo", PPO)
    register("grpo", GRPO)
    register("dapo", DAPO)
    register("drgrpo", DrGRPO)


@hookimpl
def mirage_register_estimators(register):
    register("gae", GAE)
    register("grpo", GroupOutcome)

"""How good a starting policy is: validation success and first-turn retrieval accuracy.

What ``core warmstart`` records beside a shipped policy and ``bench/mi_ceiling.py``
prints: success on the run's fixed validation set (at the validation temperature, and
greedy), and the MI proxies of the first turn's reasoning on fresh training-temperature
rollouts of P prompts x G samples (retrieval accuracy against its chance level 1/P).
"""

from __future__ import annotations

import statistics

import torch

from mirage.core.plugin_api.session import RunSession
from mirage.core.rl.batch import make_batch
from mirage.core.run.stages import validate_policy
from mirage.plugins.diagnostics.mi import MutualInformation

ROLLOUT_SEED_BASE = 80_000_000  # prompts disjoint from validation and demonstrations


def first_turn_retrieval(run: RunSession, batches: int) -> tuple[float, float]:
    """Mean first-turn retrieval accuracy and H(Z|X) over ``batches`` rollout batches of
    the run's P x G at its training temperature."""
    cfg = run.config
    mi = MutualInformation(cfg, MutualInformation.Options(scopes=["first_turn"]))
    prompts = cfg.rollout.prompts
    accuracy, entropy = [], []
    for index in range(batches):
        torch.manual_seed(index)
        seeds = [ROLLOUT_SEED_BASE + index * prompts + i for i in range(prompts)]
        batch = make_batch(0, seeds, cfg.rollout.group_size, temperature=cfg.rollout.temperature)
        run.hook.mirage_rollout(run=run, batch=batch)
        metrics = mi.measure(run, batch)
        accuracy.append(metrics["mi/first_turn/retrieval_acc"])
        entropy.append(metrics["mi/first_turn/h_cond"])
    return statistics.fmean(accuracy), statistics.fmean(entropy)


def policy_quality(run: RunSession, batches: int) -> dict[str, float]:
    """Validation success (``run.config.validation``) and first-turn retrieval accuracy,
    H(Z|X) and chance over ``batches`` batches."""
    validation = validate_policy(run)
    retrieval, h_cond = first_turn_retrieval(run, batches)
    return {
        "validation_success": validation["val/success"],
        "validation_success_greedy": validation.get("val_greedy/success"),
        "validation_episodes": run.config.validation.episodes,
        "validation_temperature": run.config.validation.temperature,
        "first_turn_retrieval": retrieval,
        "first_turn_h_cond": h_cond,
        "retrieval_chance": 1.0 / run.config.rollout.prompts,
        "retrieval_batches": batches,
        "prompts": run.config.rollout.prompts,
        "group_size": run.config.rollout.group_size,
    }

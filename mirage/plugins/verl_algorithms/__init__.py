"""PPO, GRPO, DAPO and Dr. GRPO assembled from veRL's ``core_algos`` (docs/algorithms.md).

Modules, one concept each: ``common`` (training rows, loss weights, the losses),
``outcome`` (group outcome advantages: GRPO, Dr. GRPO, DAPO), ``ppo`` (GAE over
multi-turn trajectories and the critic), ``dapo`` (dynamic sampling and the overlong
penalty), ``update`` (the epoch and mini-batch loop every algorithm runs), ``register``
(the named components).
"""

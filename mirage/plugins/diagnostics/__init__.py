"""The built-in diagnostics (docs/diagnostics.md), one module per concept.

* ``mi`` (:mod:`.mi`, :mod:`.cross_scoring`): the mutual-information proxies by in-batch
  cross-scoring, per scope (first turn, trajectory sample);
* ``reward`` (:mod:`.rewards`): reward structure of every step's batch;
* ``grad`` (:mod:`.gradients`): gradient decomposition by reward-variance bucket;
* ``collapse`` (:mod:`.collapse`): the collapse alarm, reading the ``mi`` numbers.
"""

from __future__ import annotations

from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.plugins.diagnostics.collapse import CollapseAlarm
from mirage.plugins.diagnostics.gradients import GradientDecomposition
from mirage.plugins.diagnostics.mi import MutualInformation, mi_proxies
from mirage.plugins.diagnostics.rewards import RewardStructure

__all__ = ["CollapseAlarm", "GradientDecomposition", "MutualInformation", "RewardStructure", "mi_proxies"]


@hookimpl
def mirage_register_diagnostics(register):
    register("mi", MutualInformation)
    register("reward", RewardStructure)
    register("grad", GradientDecomposition)
    register("collapse", CollapseAlarm)

"""A registered MIRAGE filter applied to a GRPO step's groups.

The step's rewards become a MIRAGE :class:`~mirage.core.rl.batch.Batch` (one group per
prompt, one single-turn trajectory per completion carrying its scalar reward and token
ids), the filter chosen by name selects from it exactly as in a MIRAGE run, and the
selection comes back as one keep flag per completion row. Any filter in the registry,
third-party ones included, works this way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mirage.core.plugin_api.components import Filter
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.batch import Batch, Group, Selection, Trajectory, Turn
from mirage.core.run.validate import build_component, build_config
from mirage.integrations.trl.options import MirageOptions


def build_filter(options: MirageOptions) -> Filter:
    """The filter ``options.filter`` built the way a MIRAGE run builds it, from a run
    config whose ``filter`` section holds the options' name, rho, score, include_zero,
    keep and filter_options. An unknown name or option raises ConfigError listing the
    valid ones."""
    settings = {"name": options.filter, "rho": options.rho, "score": options.score,
                "include_zero": options.include_zero, "keep": options.keep,
                "options": dict(options.filter_options)}
    config = build_config({"filter": settings})
    return build_component(config, build_plugins().registries, "filter", options.filter)


def filled_returns(rewards: list[float]) -> list[float]:
    """One group's rewards with the unscorable ones (NaN: every reward function returned
    None) set to the mean of the others, 0 when none is scorable: they then add no
    deviation, as their zero advantage in GRPO says."""
    scored = [r for r in rewards if not math.isnan(r)]
    mean = math.fsum(scored) / len(scored) if scored else 0.0
    return [mean if math.isnan(r) else r for r in rewards]


def rewards_batch(rewards: list[float], completion_ids: list[list[int]], group_size: int,
                  step: int) -> Batch:
    """``[P * G]`` rewards (consecutive blocks of ``group_size`` rows are one prompt's
    group, as in GRPOTrainer) as a Batch of P groups of G one-turn trajectories."""
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    groups = []
    for index in range(len(rewards) // group_size):
        rows = range(index * group_size, (index + 1) * group_size)
        returns = filled_returns([rewards[row] for row in rows])
        trajectories = [
            Trajectory(prompt_index=index, sample_index=k, seed=index, done=True, turns=[
                Turn(context="", response="", reasoning="", answer="", actions=[], format_ok=True,
                     reward=value, context_ids=[], response_ids=list(completion_ids[row]))])
            for k, (row, value) in enumerate(zip(rows, returns))
        ]
        groups.append(Group(prompt_index=index, seed=index, trajectories=trajectories))
    return Batch(step=step, groups=groups)


@dataclass
class RowSelection:
    """A filter's selection as rows: ``keep[r]`` for each of the P * G completion rows,
    beside the filter's own selection and metrics."""

    keep: list[bool]
    selection: Selection


def select_rows(chosen: Filter, batch: Batch) -> RowSelection:
    """Run ``chosen`` on ``batch`` and map its selection back onto the completion rows
    (rows in group order, G per group)."""
    selection = chosen.select(batch)
    kept = set(selection.kept_groups)
    keep = []
    for index, group in enumerate(batch.groups):
        samples = set(selection.kept_samples.get(index, range(len(group.trajectories))))
        keep.extend(index in kept and k in samples for k in range(len(group.trajectories)))
    return RowSelection(keep=keep, selection=selection)

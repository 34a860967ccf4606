"""A probe kept in the run store, so ``core show``, ``core runs`` and the app show it
beside the runs it was taken from.

It is stored as a finished run tagged :data:`PROBE_TAG` with one step, step 0, holding
each metric's mean over the probe's batches (a run's step 0 measures its starting policy
the same way), the first batch's groups and rollouts, and a ``probe`` event with every
batch's values. Its config is the probe's; sweeps never take a probe for a trained cell
(mirage/flows/load.py skips the tag).
"""

from __future__ import annotations

import json
import math

from mirage.core.plugin_api.manager import Plugins
from mirage.core.run.loop import group_rows, rollout_rows
from mirage.core.run.records import environment_record
from mirage.core.run.threads import apply_checked
from mirage.core.store.heartbeat import this_process
from mirage.core.store.labels import PROBE_TAG
from mirage.core.store.run_store import RunStore, new_run_id
from mirage.probe.measure import Probe


def store_probe(store: RunStore, probe: Probe, plugins: Plugins) -> str:
    """Write ``probe`` as a finished run of ``store``; return its id (also set on it)."""
    config = probe.config
    chosen = apply_checked(config.threads)
    record = environment_record({"count": chosen.count, "reason": chosen.reason})
    run_id = new_run_id()
    batches = len(probe.metrics)
    store.create_run(run_id, config.model_dump(mode="json"), plugins.records(), record["git"]["commit"],
                     seed=config.seed, tags=(PROBE_TAG,), environment=record, process=this_process(),
                     note=f"core probe of {probe.label}: {batches} batch(es) of {config.rollout.prompts} x "
                          f"{config.rollout.group_size}, nothing trained")
    store.record_event(run_id, 0, "backend", json.dumps(probe.facts, default=str))
    store.record_event(run_id, 0, "probe", json.dumps(
        {"model": probe.label, "batches": batches,
         "per_batch": [{name: None if math.isnan(value) else value for name, value in metrics.items()}
                       for metrics in probe.metrics]}, default=str))
    assert probe.first_batch is not None
    store.record_step(run_id, 0, probe.merged(), group_rows(probe.first_batch),
                      rollout_rows(probe.first_batch, config.rollout.stored_trajectories))
    store.set_status(run_id, "finished")
    probe.run_id = run_id
    return run_id

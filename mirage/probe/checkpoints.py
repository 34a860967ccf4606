"""``--model RUN@STEP``: the policy a stored run checkpointed at a step, as a directory.

A run's checkpoints are ``checkpoints/RUN_ID/step-NNNNNN`` beside its store
(mirage/core/run/checkpoints.py); each holds the policy as a Hugging Face checkpoint in
``policy/`` (a LoRA run's, its adapter: merged into the base once, in the cache).
Probing two steps of one run shows how its reasoning moved between them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mirage.core.config.nested import MISSING, lookup
from mirage.core.config.overrides import assign
from mirage.core.errors import ConfigError
from mirage.core.run.checkpoints import checkpoint_root, saved_steps
from mirage.core.store.file import unreadable_problem
from mirage.core.store.run_index import find_run
from mirage.core.store.run_store import RunStore


def is_run_step(value: str) -> bool:
    """Whether ``--model value`` names a stored run's step rather than a path or hub id
    (``RUN@STEP`` with a whole-number step, and no such path exists)."""
    ref, at, step = value.rpartition("@")
    return bool(at and ref and step.isdigit()) and not Path(value).expanduser().exists()


def resolve_model(value: str, db: Path, data: dict[str, Any]) -> tuple[str | None, str]:
    """(model path for the config, label) of one ``--model``. For ``RUN@STEP`` the run's
    environment settings fill ``data``'s where the command line set none, so the
    probe sees the prompts the run trained on, and its rollout settings (P, G, temperature,
    lengths) fill those not given; ``RUN@0`` is the policy the run started
    from (its own ``--model``, or the warm start its model options name: path None)."""
    if not is_run_step(value):
        return value, value
    ref, _, step = value.rpartition("@")
    if not db.is_file():
        raise ConfigError(f"--model {value!r}: no run store at {db} to find run {ref!r} in (--db)")
    if problem := unreadable_problem(db):
        raise ConfigError(f"--db {str(db)!r} {problem}")
    run = find_run(RunStore(db).list_runs(), ref)
    stored = run["config"]
    if lookup(data, "env.name") in (MISSING, lookup(stored, "env.name")):
        _fill(data, "env", stored)
    _fill(data, "rollout", stored)
    label = f"{run['run_id']}@{int(step)}"
    if int(step) == 0:  # the policy it started from: its --model, or its warm start's settings
        _fill(data, "model.options", stored)
        started = lookup(stored, "model.path")
        return (None if started is MISSING else started), label
    root = checkpoint_root(db, run["run_id"])
    saved = {found: path / "policy" for found, path in saved_steps(root).items() if (path / "policy").is_dir()}
    if int(step) not in saved:
        listed = ", ".join(map(str, [0, *saved]))
        raise ConfigError(f"--model {value!r}: run {run['run_id']} has no checkpoint at step {int(step)}; "
                          f"steps to probe: {listed} (0: the policy it started from; a run keeps its "
                          "newest checkpoint_keep checkpoints)")
    if (saved[int(step)] / "adapter_config.json").is_file():  # a LoRA run's: its adapter merged
        from mirage.core.run.loop import cache_dir
        from mirage.plugins.backend_local.merge import merged_in_cache

        return str(merged_in_cache(run["run_id"], int(step), db, cache_dir())), label
    return str(saved[int(step)]), label


def _fill(data: dict[str, Any], section: str, stored: dict[str, Any]) -> None:
    """Give ``data``'s ``section`` each setting of the stored run's that the command line
    did not set."""
    settings = lookup(stored, section)
    for key, value in (settings.items() if isinstance(settings, dict) else ()):
        if lookup(data, f"{section}.{key}") is MISSING:
            assign(data, f"{section}.{key}", value)

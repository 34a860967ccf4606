"""A run's checkpoints and the rules for resuming from them.

The policy (the backend's ``save``) and the plugins' ``run.state`` are checkpointed every
``checkpoint_every`` steps and at the last step, in ``checkpoints/RUN_ID/step-NNNNNN``
beside the run store; the newest ``checkpoint_keep`` are kept (all with 0). A crash loses
at most the steps since the newest, and a resume restores it and recomputes the steps
after it, so no row is stored twice.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.session import RunSession
from mirage.core.store.heartbeat import effective_status, liveness
from mirage.core.store.run_store import RunStore


def checkpoint_root(store: RunStore | Path, run_id: str) -> Path:
    """The folder of ``run_id``'s checkpoints, beside the store (or the store's file)."""
    path = store if isinstance(store, Path) else store.path
    return path.parent / "checkpoints" / run_id


def checkpoint_due(config: RunConfig, step: int) -> bool:
    """Whether ``step`` ends with a checkpoint (step 0 never does: nothing was trained)."""
    return step > 0 and (step % config.checkpoint_every == 0 or step == config.steps)


def _saved(root: Path) -> list[Path]:
    """The whole checkpoints under ``root``, oldest first (a partial one is a ``.tmp-``)."""
    return sorted(root.glob("step-*"))


def checkpoint_dir(root: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` lives under ``root``."""
    return root / f"step-{step:06d}"


def saved_steps(root: Path) -> dict[int, Path]:
    """Step -> folder of each whole checkpoint under ``root``, oldest first."""
    return {int(path.name.removeprefix("step-")): path for path in _saved(root)}


def save_checkpoint(run: RunSession, root: Path, step: int) -> None:
    """Save the policy and ``run.state`` as the checkpoint of ``step``; drop the older ones
    beyond ``checkpoint_keep``."""
    target = checkpoint_dir(root, step)
    tmp = root / f".tmp-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    run.backend.save(tmp)
    (tmp / "session.json").write_text(json.dumps({"step": step, "state": run.state}))
    tmp.rename(target)  # a checkpoint exists whole or not at all
    keep = run.config.checkpoint_keep
    older = [old for old in _saved(root) if old != target]
    for old in older[: max(len(older) - keep + 1, 0)] if keep else []:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(root: Path) -> int | None:
    """The step of the newest whole checkpoint under ``root``, or None."""
    return max(saved_steps(root), default=None)


def restore_checkpoint(run: RunSession, root: Path, planned: int) -> int:
    """Load the newest checkpoint into ``run`` (none: the run starts over at step 0) and
    return its step; ConfigError unless it is the step ``plan_resume`` planned from."""
    found = _saved(root)
    step = 0
    if found:
        run.backend.load(found[-1])
        saved = json.loads((found[-1] / "session.json").read_text())
        run.state = saved["state"]
        step = int(saved["step"])
    if step != planned:
        raise ConfigError(f"--resume: the checkpoint of step {planned} in {root} went away")
    return step


def plan_resume(db: Path, run_id: str, extend_to: int | None) -> tuple[RunConfig, int]:
    """The config to resume ``run_id`` with and the step it restarts from; ConfigError
    (nothing written) when the resume would lose results:

    - a run whose process is alive (its heartbeat, mirage/core/store/heartbeat.py) is refused;
    - a finished run is complete: resuming it is refused unless ``extend_to`` asks for
      more steps than it has, and its final checkpoint is there to continue from;
    - a resume only deletes steps it can recompute: those after its newest checkpoint
      (step 0, the starting policy, counts as one). Steps that a missing checkpoint
      covered (a run loaded from a sweep cell keeps its checkpoints in the cell's folder,
      not beside the store) are never deleted: the resume is refused, naming the path.
    """
    if not db.exists():
        raise ConfigError(f"--resume: no run store at {db}")
    store = RunStore(db)
    row = store.get_run(run_id)
    if row is None:
        raise ConfigError(f"--resume: no run {run_id!r} in {db}")
    # A run from before heartbeats (no process recorded) is resumable, as it always was.
    if row.get("pid") and effective_status(row) == "running":
        raise ConfigError(f"--resume {run_id}: the run is still running ({liveness(row)}); "
                          "a run is resumed once it has crashed, failed or stopped")
    config = RunConfig.model_validate(row["config"])
    last = row["last_step"] or 0
    root = checkpoint_root(store, run_id)
    latest = latest_checkpoint(root) or 0
    if extend_to is not None and extend_to <= config.steps:
        raise ConfigError(f"--resume {run_id}: --steps {extend_to} does not extend its {config.steps} steps")
    if row["status"] == "finished" and extend_to is None:
        raise ConfigError(f"run {run_id} is finished (steps 0-{last}); nothing to resume "
                          f"(to add steps: --resume {run_id} --steps N with N > {config.steps})")
    needed = last if row["status"] == "finished" else last - config.checkpoint_every
    if latest < needed:
        raise ConfigError(
            f"--resume {run_id}: no checkpoint at step {max(needed, 1)} or later in {root} "
            f"(newest: {latest or 'none'}); resuming would delete steps {latest + 1}-{last}, "
            "which it cannot recompute")
    if extend_to is not None:
        config.steps = extend_to
    return config, latest

"""``core merge RUN@STEP --out DIR``: a stored run's policy at a checkpoint as a whole Hugging
Face checkpoint directory, its LoRA adapter merged into the base (a run without LoRA: its
policy as it is). What ``core run --model``, ``core probe --model`` and vLLM load. A
built-in command plugin (mirage.builtins)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

import typer

from mirage.core.cli.common import DB_HELP, check_readable_store, fail
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.hookspecs import hookimpl

RUN_STEP_HELP = ("RUN@STEP: a stored run (id, name or id prefix, in --db) and one of its "
                 "checkpoints' steps (0: the policy it started from)")


def merge(
    run_step: str = typer.Argument(..., metavar="RUN@STEP", help=RUN_STEP_HELP),
    out: Path = typer.Option(..., "--out", help="the folder to write the checkpoint in (new or empty)"),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
) -> None:
    """Write a stored run's policy at a checkpoint as a Hugging Face checkpoint directory,
    its LoRA adapter merged into the base weights."""
    from mirage.core.store.run_store import default_db_path

    target = db if db is not None else default_db_path()
    check_readable_store(target)
    if not str(out) or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        fail(f"--out {str(out)!r}: expected a new or empty folder to write the checkpoint in")
    try:
        backend = restored(run_step, target)
    except ConfigError as error:
        fail(str(error))
    staging = out.parent / f".{out.name}.merging"
    shutil.rmtree(staging, ignore_errors=True)
    backend.export(staging)  # whole or not at all
    if out.exists():
        out.rmdir()
    staging.rename(out)
    typer.echo(f"{run_step}: written to {out}" + (" (adapter merged)" if backend.adapters else ""))


def restored(run_step: str, db: Path):
    """The local backend holding the policy ``run_step`` names: the run's base prepared as
    the run prepared it (model.path or its warm start, on the CPU), its checkpoint loaded.
    ConfigError (one line) for a value that is not RUN@STEP, an unknown run or step."""
    from mirage.core.config.run_config import RunConfig
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.plugin_api.registry import UnknownComponentError
    from mirage.core.run.checkpoints import checkpoint_root, saved_steps
    from mirage.core.run.loop import cache_dir
    from mirage.core.store.run_index import find_run
    from mirage.core.store.run_store import RunStore
    from mirage.plugins.backend_local.backend import LocalBackend

    ref, at, step = run_step.rpartition("@")
    if not (at and ref and step.isdigit()):
        raise ConfigError(f"{run_step!r} is not RUN@STEP (a run's id, name or id prefix, '@', a step)")
    run = find_run(RunStore(db).list_runs(), ref)
    saved = saved_steps(checkpoint_root(db, run["run_id"]))
    if int(step) != 0 and int(step) not in saved:
        raise ConfigError(f"run {run['run_id']} has no checkpoint at step {int(step)}; steps: "
                          f"{', '.join(map(str, [0, *saved]))} (0: the policy it started from)")
    config = RunConfig.model_validate(run["config"])
    config.model.parallel, config.model.device = "none", "cpu"
    try:
        env_cls = build_plugins().registries.envs.get(config.env.name)
    except UnknownComponentError as error:
        raise ConfigError(str(error)) from None
    # the run's backend may be one built on the local one (vllm): the local one's options only
    fields = LocalBackend.Options.model_fields
    options = LocalBackend.Options(**{k: v for k, v in config.model.options.items() if k in fields})
    backend = LocalBackend(config, options)
    backend.prepare(env_cls, cache_dir(), progress=False)
    if int(step) != 0:
        backend.load(saved[int(step)])
    return backend


def merged_in_cache(run_id: str, step: int, db: Path, cache: Path) -> Path:
    """The merged checkpoint of a LoRA run's step (``core probe --model RUN@STEP``), made
    once per adapter in ``cache``: its name carries a digest of the adapter's weights, so a
    checkpoint that a resume rewrote is merged anew."""
    import hashlib

    from mirage.core.run.checkpoints import checkpoint_dir, checkpoint_root

    adapter = checkpoint_dir(checkpoint_root(db, run_id), step) / "policy" / "adapter_model.safetensors"
    digest = hashlib.sha256(adapter.read_bytes()).hexdigest()[:16]
    target = cache / "merged" / f"{run_id}-step-{step:06d}-{digest}"
    if not (target / "config.json").is_file():
        staging = target.parent / f".{target.name}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        restored(f"{run_id}@{step}", db).export(staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


@hookimpl
def mirage_register_commands(cli: typer.Typer) -> None:
    cli.command()(merge)

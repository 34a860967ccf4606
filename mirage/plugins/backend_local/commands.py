"""``core warmstart ENV``: where an environment's warm start comes from, and
``--rebuild`` to train it anew and record it as the shipped policy with its provenance
(mirage/plugins/backend_local/shipped.py). A built-in command plugin (mirage.builtins)."""

from __future__ import annotations

import json
import platform
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import typer

from mirage.core.cli.common import fail, settings
from mirage.core.config.overrides import assign
from mirage.core.config.run_config import MAX_BATCH_TRAJECTORIES
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.plugins.backend_local.shipped import FACTS_FILE

MAX_BATCHES = 1000  # each is P x G rollouts and their cross-scoring
REBUILD_HELP = ("train the warm start anew (cache and shipped policy ignored), measure it and "
                "record it in --out with its provenance")


def warmstart(
    env: str = typer.Argument(..., help="environment name (core plugins lists them)"),
    rebuild: bool = typer.Option(False, "--rebuild", help=REBUILD_HELP),
    out: Optional[Path] = typer.Option(
        None, help="with --rebuild: the folder to record the policy in [default: the package's "
        "shipped policy of ENV, ENV-image with --set env.options.observation=image]"),
    episodes: int = typer.Option(256, min=1, max=MAX_BATCH_TRAJECTORIES,
                                 help="with --rebuild: validation episodes measured"),
    batches: int = typer.Option(8, min=1, max=MAX_BATCHES, help="with --rebuild: P x G rollout "
                                "batches whose first-turn retrieval accuracy is measured"),
    set_: list[str] = typer.Option([], "--set", help="config override PATH=VALUE, e.g. "
                                   "model.options.warmstart_steps=600 (repeatable)"),
) -> None:
    """Show where ENV's warm start comes from (shipped, cached or trained now), or rebuild
    and record it."""
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.run.loop import cache_dir, open_session
    from mirage.core.run.threads import apply_checked
    from mirage.core.run.validate import parse_config, validate_config
    from mirage.plugins.backend_local import shipped, warmstart as ws

    if out is not None:
        _check_out(out)
    data: dict[str, Any] = {"env": {"name": env}}
    try:
        for path, value in settings(set_).items():
            assign(data, path, value)
        config = parse_config(data)
        if config.model.backend != "local" or config.model.path is not None:
            raise ConfigError("core warmstart builds the local backend's tiny policy; "
                              "model.backend must be local and model.path unset")
        plugins = build_plugins()
        env_options = validate_config(config, plugins)
        threads = apply_checked(config.threads)
    except ConfigError as error:
        fail(str(error))
    session = open_session(config, plugins, env_options)
    env_cls, options = session.env_cls, session.backend.options
    key = ws.cache_key(config, options, env_cls)
    if not rebuild:
        facts = session.backend.prepare(env_cls, cache_dir())
        typer.echo(f"{env}: warm start {key} from the {facts['warmstart_source']}")
        record = shipped.record(shipped.policy_of(config))
        if facts["warmstart_source"] == "shipped" and record:
            typer.echo(json.dumps(record["provenance"], indent=1))
        else:
            typer.echo(json.dumps({k: v for k, v in facts.items() if k.startswith("warmstart")}, indent=1))
        return

    target = out if out is not None else shipped.POLICIES / shipped.policy_of(config)
    started = time.perf_counter()
    model, tokenizer, facts = ws.build(config, options, env_cls, progress=True)
    staging = target.parent / f".{target.name}.new"
    shutil.rmtree(staging, ignore_errors=True)
    ws.save(staging, model, tokenizer, {**facts, "warmstart_key": key})
    typer.echo(f"{env}: built in {(time.perf_counter() - started) / 60:.1f} min, final loss "
               f"{facts['warmstart_final_loss']:.3f}; measuring it", err=True)
    quality = _measure(config, plugins, staging, episodes, batches)
    provenance = {
        "command": " ".join(["core warmstart", env, *(f"--set {s}" for s in set_), "--rebuild"]),
        "commit": _git_commit(),
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "threads": threads.count},
        "settings": {"env": config.env.model_dump(mode="json", exclude={"chat_template", "show_instruction"}),
                     "model_options": options.model_dump(mode="json"),
                     "warmstart_seed": ws.warmstart_seed(config, options)},
        "quality": quality,
    }
    (staging / ws.FACTS_FILE).write_text(json.dumps(
        {**facts, "warmstart_key": key, "provenance": provenance}, indent=1) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    typer.echo(json.dumps({"warmstart_key": key, **{k: facts[k] for k in sorted(facts)},
                           "quality": quality}, indent=1))
    typer.echo(f"recorded in {target}")


def _check_out(out: Path) -> None:
    """A folder to record a policy in, replaced whole: a new one or a recorded policy's."""
    if not str(out) or str(out) == "." or (out.exists() and not out.is_dir()):
        fail(f"--out {str(out)!r}: expected a folder to record the policy in (it is replaced)")
    if out.exists() and any(out.iterdir()) and not (out / FACTS_FILE).exists():
        fail(f"--out {str(out)!r} holds files but no recorded warm start; it would be replaced "
             "whole: name a new folder or a recorded policy's")


def _measure(config, plugins, directory: Path, episodes: int, batches: int) -> dict[str, Any]:
    """The policy saved in ``directory`` measured through a run session that loads it as
    ``model.path``, with the prompts the tiny policy sees (no instruction, no chat template)."""
    from mirage.core.run.loop import cache_dir, open_session
    from mirage.core.run.validate import validate_config
    from mirage.plugins.backend_local.quality import policy_quality

    data = config.model_dump(mode="json")
    data["model"]["path"] = str(directory)
    data["env"] |= {"show_instruction": False, "chat_template": False}
    data["validation"]["episodes"] = episodes
    measured = type(config).model_validate(data)
    session = open_session(measured, plugins, validate_config(measured, plugins))
    session.backend.prepare(session.env_cls, cache_dir(), progress=False)
    return policy_quality(session, batches)


def _git_commit() -> str | None:
    from mirage.core.run.records import git_record

    record = git_record()
    return None if record.get("commit") is None else record["commit"] + ("-dirty" if record.get("dirty") else "")


@hookimpl
def mirage_register_commands(cli: typer.Typer) -> None:
    cli.command()(warmstart)


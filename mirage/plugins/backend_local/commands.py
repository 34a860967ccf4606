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
    model: Optional[str] = typer.Option(
        None, "--model", help="fine-tune this pretrained checkpoint (directory, hub id, or .gguf file) "
        "on ENV's demonstrations in its own chat format, LoRA with --set model.lora.rank=N, and "
        "write it to --out (required)"),
    target_format: float = typer.Option(0.9, min=0.0, max=1.0, help="with --model: stop once the "
                                        "validation rooms' format validity reaches this"),
    check_every: int = typer.Option(10, min=1, help="with --model: steps between format checks"),
    max_steps: int = typer.Option(200, min=1, max=100_000, help="with --model: the step limit"),
    batch: int = typer.Option(8, min=1, max=1024, help="with --model: demonstration pairs per step"),
    demos: int = typer.Option(256, min=1, max=100_000, help="with --model: demonstrated episodes"),
    lr: Optional[float] = typer.Option(None, min=0.0, help="with --model: learning rate "
                                       "[default: 1e-3 with LoRA, 5e-5 for every weight]"),
) -> None:
    """Show where ENV's warm start comes from (shipped, cached or trained now), or rebuild
    and record it; with --model, warm-start a pretrained checkpoint."""
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.run.loop import cache_dir, open_session
    from mirage.core.run.threads import apply_checked
    from mirage.core.run.validate import parse_config, validate_config
    from mirage.plugins.backend_local import shipped, warmstart as ws

    if model is not None:
        if out is None:
            fail("core warmstart --model needs --out, the folder to write the warm-started checkpoint in")
        if rebuild:
            fail("--rebuild rebuilds the tiny policy; with --model every run is a new warm start: drop --rebuild")
        _check_out(out)
        return _pretrained(env, model, out, set_, target_format=target_format, check_every=check_every,
                           max_steps=max_steps, batch=batch, demos=demos, lr=lr)
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


def _pretrained(env: str, model: str, out: Path, set_: list[str], **how: Any) -> None:
    """``core warmstart ENV --model PATH_OR_ID``: pretrained_warmstart.py."""
    from mirage.core.cli.common import check_paths
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.run.loop import cache_dir, open_session
    from mirage.core.run.threads import apply_checked
    from mirage.core.run.validate import parse_config, validate_config
    from mirage.plugins.backend_local import pretrained_warmstart as pws

    check_paths(None, model)
    data: dict[str, Any] = {"env": {"name": env}}
    try:
        for path, value in settings(set_).items():
            assign(data, path, value)
        assign(data, "model.path", model)
        config = parse_config(data)
        if config.model.backend != "local":
            raise ConfigError("core warmstart --model trains through the local backend; model.backend must be local")
        plugins = build_plugins()
        env_options = validate_config(config, plugins)
        threads = apply_checked(config.threads)
        started = time.perf_counter()
        session = open_session(config, plugins, env_options)
        loaded = session.backend.prepare(session.env_cls, cache_dir())
    except ConfigError as error:
        fail(str(error))
    facts = pws.finetune(session, target_format=how["target_format"], check_every=how["check_every"],
                         max_steps=how["max_steps"], batch_size=how["batch"], episodes=how["demos"],
                         lr=how["lr"])
    command = ["core warmstart", env, "--model", model, "--out", str(out),
               *(f"--{k.replace('_', '-')} {v}" for k, v in how.items() if v is not None),
               *(f"--set {s}" for s in set_)]
    facts |= {
        "source_model": model,
        "env": env,
        "lora": {k: loaded[k] for k in loaded if k.startswith("lora_")} or None,
        "saved": "merged" if session.backend.adapters is not None else "full",
        "seconds": round(time.perf_counter() - started, 1),
        "provenance": {
            "command": " ".join(command),
            "commit": _git_commit(),
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": {"platform": platform.platform(), "threads": threads.count},
            "settings": {"env": config.env.model_dump(mode="json"), "seed": config.seed,
                         "model_options": session.backend.options.model_dump(mode="json")},
        },
    }
    pws.save(session, out, facts)
    typer.echo(json.dumps({k: v for k, v in facts.items() if k not in ("provenance", "checks")}, indent=1))
    typer.echo(f"{env}: stopped by the {facts['warmstart_stopped_by'].replace('_', ' ')} after "
               f"{facts['warmstart_steps']} steps, format validity {facts['format_valid_before']:.3f} -> "
               f"{facts['format_valid_after']:.3f}; written to {out} (core run --model {out})")


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


"""``core probe``: diagnose a policy for template collapse without training it; added to the
``core`` program as a command plugin (mirage/builtins.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from mirage.core.cli.common import DB_HELP, check_paths, check_readable_store, fail, settings
from mirage.core.cli.run_options import PROBE_OPTIONS, GivenOptions, with_config_options
from mirage.core.config.overrides import assign
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.store.run_store import RunStore, default_db_path
from mirage.probe.checkpoints import is_run_step, resolve_model

MODEL_HELP = ("a Hugging Face causal LM (checkpoint directory or hub id), or RUN@STEP: a stored "
              "run's checkpoint at that step (in --db); twice to compare two policies on the same "
              "prompts (the second minus the first, paired by batch); none: the environment's "
              "built-in policy")


@with_config_options(PROBE_OPTIONS)
def probe(
    given: GivenOptions,
    model: list[str] = typer.Option([], "--model", help=MODEL_HELP),
    batches: int = typer.Option(1, min=1, max=1000, help="batches of P x G rollouts per policy "
                                "(2 or more give t intervals)"),
    set_: list[str] = typer.Option([], "--set", help="set any config PATH=VALUE, e.g. "
                                   "model.device=cuda or rollout.max_new_tokens=64"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON (every batch's values)"),
    store: bool = typer.Option(False, "--store", help="keep each probe as a run in --db, tagged "
                               "probe (core show and the app show it)"),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    quiet: bool = typer.Option(False, help="no progress bars"),
) -> None:
    """Diagnose a policy for template collapse without training it.

    Rolls out --batches batches of P x G episodes of --env with each --model, and prints
    the MI proxies (first-turn retrieval against chance, MI-Est, MI-ZScore, H(Z|X), H(Z)),
    format validity, success, reward variance per prompt and the regime signature.
    The first --model is the baseline the regime's entropy criteria compare against."""
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.probe.measure import DEFAULT_LABEL, probe_config, probe_policy
    from mirage.probe.render import as_json as to_json, render
    from mirage.probe.storing import store_probe

    if len(model) > 2:
        fail(f"--model given {len(model)} times; a probe compares at most two policies")
    reads = any(is_run_step(value) for value in model)
    if db is not None and not (store or reads):
        fail("--db names the store --model RUN@STEP reads and --store writes; neither is given")
    target = db if db is not None else default_db_path()
    if store:
        check_paths(target, None)
    elif reads:
        check_readable_store(target)
    try:
        data: dict = {}
        given.apply(data)
        for path, value in settings(set_).items():
            assign(data, path, value)
        sources = [resolve_model(value, target, data) for value in model] or [(None, DEFAULT_LABEL)]
        for path, _ in sources:
            if path is not None:
                check_paths(None, path)
        plugins = build_plugins()
        probes = [probe_policy(probe_config(data, path), batches, label, plugins=plugins, progress=not quiet)
                  for path, label in sources]
    except ConfigError as error:
        fail(str(error))
    if store:
        run_store = RunStore(target)
        for found in probes:
            store_probe(run_store, found, plugins)
    typer.echo(json.dumps(to_json(probes), indent=2) if as_json else render(probes))


@hookimpl
def mirage_register_commands(cli: typer.Typer) -> None:
    cli.command()(probe)

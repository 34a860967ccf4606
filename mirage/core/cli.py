"""The ``core`` command line. It only builds a RunConfig; defaults live in core/config.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from mirage.core import run_commands
from mirage.core.cli_common import DB_HELP, fail as _fail
from mirage.core.config import RunConfig
from mirage.core.experiments import load_registry
from mirage.core.overrides import assign, parse_settings, setting_type
from mirage.core.run_index import find_run
from mirage.core.paths import check_model_path, check_store_path, read_text_file
from mirage.core.store import RunStore, default_db_path
from mirage.core.validate import ConfigError, build_config

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="MIRAGE: multi-turn agent RL with template-collapse diagnostics.")
_D = RunConfig()


def _pairs(pairs: list[str], flag: str, form: str = "PATH=VALUE") -> dict[str, Any]:
    """``KEY=VALUE`` options (VALUE as JSON, else a string) as a dict."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            _fail(f"{flag} expects {form}, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _read_config_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(read_text_file(path, "--config")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"--config {path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of config sections")
    return data


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _set(data: dict, path: str, value: Any) -> None:
    if value is not None:  # an option not given
        assign(data, path, value)


def _start_data(experiment: Optional[str], registry: Optional[Path],
                config_file: Optional[Path]) -> dict[str, Any]:
    """Config data from an experiment's base and a config file (command-line options
    are set on top of it)."""
    data: dict[str, Any] = {}
    try:
        if experiment is not None:
            experiments = load_registry(registry)
            if experiment not in experiments:
                _fail(f"unknown experiment {experiment!r}; valid: {', '.join(sorted(experiments))}")
            data = experiments[experiment].base
        if config_file is not None:
            data = _merge(data, _read_config_file(config_file))
    except ConfigError as error:
        _fail(str(error))
    return data


def _check_paths(db: Optional[Path], model: Optional[str]) -> None:
    """Refuse a bad --db or --model before anything is loaded (one line, exit 2)."""
    try:
        if db is not None:
            check_store_path(db)
        if model is not None:
            check_model_path(model)
    except ConfigError as error:
        _fail(str(error))


def _set_options(data: dict[str, Any], pairs: list[tuple[str, Any]], env_opt: list[str],
                 settings: dict[str, Any] | None = None) -> None:
    """Named options, then --env-opt, then --set (applied last, so it wins)."""
    for path, value in pairs:
        _set(data, path, value)
    if env_opt:
        data.setdefault("env", {}).setdefault("options", {}).update(_pairs(env_opt, "--env-opt", "KEY=VALUE"))
    for path, value in (settings or {}).items():
        assign(data, path, value)


def _settings(pairs: list[str], flag: str = "--set") -> dict[str, Any]:
    try:
        return parse_settings(pairs, flag)
    except ConfigError as error:
        _fail(str(error))


_F = _D.filter
REGISTRY_HELP = "experiment registry [default: ./registry.yaml, else the one shipped with the package]"


@app.command()
def run(
    env: Optional[str] = typer.Option(None, help=f"environment name [default: {_D.env.name}]"),
    filter: Optional[str] = typer.Option(None, "--filter", help=f"filter name [default: {_F.name}]"),
    rho: Optional[float] = typer.Option(None, help=f"filter keep mass/fraction in (0, 1] [default: {_F.rho}]"),
    filter_mode: Optional[str] = typer.Option(
        None, help=f"top_p selection: linear (score mass) or softmax (nucleus) [default: {_F.mode}]"),
    filter_score: Optional[str] = typer.Option(
        None, help=f"reward score to rank by: variance (RV) or std [default: {_F.score}]"),
    keep: Optional[str] = typer.Option(
        None, help=f"ranking filters keep the largest or the smallest scores [default: {_F.keep}]"),
    include_zero: Optional[bool] = typer.Option(
        None, "--include-zero/--exclude-zero",
        help=f"may ranking filters keep zero-variance groups [default: {'include' if _F.include_zero else 'exclude'}]"),
    loss_scaling: Optional[str] = typer.Option(
        None, help=f"scale advantages by the kept share: none, linear or sqrt [default: {_F.loss_scaling}]"),
    step_size_matching: Optional[bool] = typer.Option(
        None, "--step-size-matching/--no-step-size-matching",
        help=f"also scale advantages by rho [default: {'on' if _F.step_size_matching else 'off'}]"),
    max_empty_steps: Optional[int] = typer.Option(
        None, help=f"stop the run after N steps in a row with nothing kept [default: {_F.max_empty_steps}]"),
    algo: Optional[str] = typer.Option(None, help=f"update algorithm [default: {_D.algorithm.name}]"),
    steps: Optional[int] = typer.Option(None, help=f"rollout-update iterations [default: {_D.steps}]"),
    seed: Optional[int] = typer.Option(None, help=f"run seed [default: {_D.seed}]"),
    model: Optional[str] = typer.Option(None, help="HF checkpoint dir or hub id [default: tiny warm-started model]"),
    backend: Optional[str] = typer.Option(
        None, help=f"backend that runs the policy: local, vllm (docs/vllm.md) or a plugin's [default: {_D.model.backend}]"),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    resume: Optional[str] = typer.Option(
        None, help="continue RUN_ID (not finished) from its last checkpoint; with --steps N "
        "above its steps, extend a finished run to N steps"),
    prompts: Optional[int] = typer.Option(None, help=f"P, prompts per iteration [default: {_D.rollout.prompts}]"),
    group_size: Optional[int] = typer.Option(None, help=f"G, rollouts per prompt [default: {_D.rollout.group_size}]"),
    lr: Optional[float] = typer.Option(None, help=f"learning rate [default: {_D.algorithm.lr}]"),
    entropy_coef: Optional[float] = typer.Option(None, help=f"entropy bonus [default: {_D.algorithm.entropy_coef}]"),
    kl_coef: Optional[float] = typer.Option(None, help=f"KL to the initial policy [default: {_D.algorithm.kl_coef}]"),
    val_every: Optional[int] = typer.Option(None, help=f"validate every N steps [default: {_D.validation.every}]"),
    val_episodes: Optional[int] = typer.Option(None, help=f"validation episodes [default: {_D.validation.episodes}]"),
    env_opt: list[str] = typer.Option([], "--env-opt", help="environment option KEY=VALUE (repeatable), e.g. slip=0.1"),
    logger: list[str] = typer.Option(
        [], "--logger", help="also log each step's metrics to this logger (repeatable): wandb, "
        "mlflow, tensorboard or a plugin's; each needs its extra (docs/loggers.md)"),
    set_: list[str] = typer.Option(
        [], "--set", help="set any config PATH=VALUE (repeatable, applied last), e.g. "
        "algorithm.clip_ratio_high=0.28; the value is typed by the config"),
    config_file: Optional[Path] = typer.Option(None, "--config", help="JSON/YAML file with a (partial) RunConfig"),
    experiment: Optional[str] = typer.Option(None, help="start from this registry.yaml experiment's base config"),
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
    name: Optional[str] = typer.Option(None, help="a name for the run (see `core rename`)"),
    tag: list[str] = typer.Option([], "--tag", help="label the run (repeatable; see `core tag`)"),
    note: Optional[str] = typer.Option(None, help="a free-text note on the run (see `core note`)"),
    quiet: bool = typer.Option(False, help="no progress bars (the warm start's included); warnings and the result line still print"),
) -> None:
    """Run rollout -> score -> diagnose -> filter -> update for --steps iterations.

    --resume continues a run that crashed, failed or stopped from its last checkpoint with
    its stored config: options that would change its training are refused (so are --name,
    --tag and --note: relabel with `core rename/tag/note`); only --steps may extend it."""
    from mirage.core.loop import RunStopped, execute
    from mirage.core.plugin_errors import PluginError
    from mirage.core.plugin_results import PluginResultError

    target = db if db is not None else default_db_path()
    _check_paths(target, model)
    settings = _settings(set_)
    if resume is not None and target.is_file():  # a name or id prefix names the run too
        try:
            resume = find_run(RunStore(target).list_runs(), resume)["run_id"]
        except ConfigError as error:
            _fail(f"--resume: {error}")
    if resume is not None:
        given = [name for name, value in (
            ("--env", env), ("--filter", filter), ("--rho", rho), ("--filter-mode", filter_mode),
            ("--filter-score", filter_score), ("--keep", keep), ("--include-zero", include_zero),
            ("--loss-scaling", loss_scaling), ("--step-size-matching", step_size_matching),
            ("--max-empty-steps", max_empty_steps), ("--algo", algo), ("--seed", seed),
            ("--model", model), ("--backend", backend), ("--prompts", prompts), ("--group-size", group_size),
            ("--lr", lr), ("--entropy-coef", entropy_coef), ("--kl-coef", kl_coef),
            ("--val-every", val_every), ("--val-episodes", val_episodes),
            ("--config", config_file), ("--experiment", experiment), ("--registry", registry),
        ) if value is not None]
        given += (["--env-opt"] if env_opt else []) + (["--logger"] if logger else [])
        given += [f"--set {p}" for p in settings]
        labels = [flag for flag, value in (("--name", name), ("--tag", tag or None), ("--note", note))
                  if value is not None]
        if given or labels:
            _fail(f"--resume {resume!r} continues the stored config; {', '.join(given + labels)} cannot "
                  "be changed (only --steps, to extend it" + ("; relabel a run with core rename, "
                  "core tag or core note" if labels else "") + ")")
    if name is not None:
        if not name.strip():
            _fail("--name cannot be empty")
        if target.is_file():
            run_commands.check_new_name(RunStore(target), name)
    data = _start_data(experiment, registry, config_file)
    _set_options(data, [
        ("env.name", env), ("filter.name", filter), ("filter.rho", rho), ("filter.mode", filter_mode),
        ("filter.score", filter_score), ("filter.keep", keep), ("filter.include_zero", include_zero),
        ("filter.loss_scaling", loss_scaling), ("filter.step_size_matching", step_size_matching),
        ("filter.max_empty_steps", max_empty_steps), ("algorithm.name", algo),
        ("steps", steps), ("seed", seed), ("model.path", model), ("model.backend", backend),
        ("rollout.prompts", prompts), ("rollout.group_size", group_size), ("algorithm.lr", lr),
        ("algorithm.entropy_coef", entropy_coef),
        ("algorithm.kl_coef", kl_coef), ("validation.every", val_every),
        ("validation.episodes", val_episodes), ("loggers.names", logger or None),
    ], env_opt, settings)
    try:
        config = None if resume else build_config(data)
        run_id = execute(config, target, resume=resume, progress=not quiet,
                         extend_to=steps if resume else None, name=name, tags=tuple(tag), note=note)
    except ConfigError as error:
        _fail(str(error))
    except RunStopped as error:
        typer.echo(f"stopped: {error}", err=True)
        raise typer.Exit(1)
    except (PluginError, PluginResultError) as error:  # one line; the store's events hold the traceback
        typer.echo(f"failed: {error}", err=True)
        raise typer.Exit(1)
    typer.echo(f"run {run_id} finished; results in {target}")


@app.command()
def preflight(
    env: Optional[str] = typer.Option(None, help=f"environment name [default: {_D.env.name}]"),
    env_opt: list[str] = typer.Option([], "--env-opt", help="environment option KEY=VALUE (repeatable), e.g. slip=0.1"),
    config_file: Optional[Path] = typer.Option(None, "--config", help="JSON/YAML file with a (partial) RunConfig"),
    seed: Optional[int] = typer.Option(None, help=f"run seed [default: {_D.seed}]"),
    prompts: Optional[int] = typer.Option(None, help=f"P, prompts in the batch [default: {_D.rollout.prompts}]"),
    group_size: Optional[int] = typer.Option(None, help=f"G, rollouts per prompt [default: {_D.rollout.group_size}]"),
    model: Optional[str] = typer.Option(None, help="HF checkpoint dir or hub id [default: tiny warm-started model]"),
) -> None:
    """One rollout batch with the current policy: is RV filtering likely to help?

    Prints the reward variance (RV) per prompt as a histogram, Std(RV)/Mean(RV), the
    share of zero-variance prompts and the verdict of PAPER.md section 4's predictor."""
    from mirage.core.preflight import run_preflight

    _check_paths(None, model)
    data = _start_data(None, None, config_file)
    _set_options(data, [
        ("env.name", env), ("seed", seed), ("model.path", model), ("rollout.prompts", prompts),
        ("rollout.group_size", group_size),
    ], env_opt)
    try:
        report = run_preflight(build_config(data))
    except ConfigError as error:
        _fail(str(error))
    typer.echo(report.render())


@app.command()
def experiments(registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP)) -> None:
    """Validate registry.yaml and list its experiments with their cell counts; an
    experiment needing a component no plugin registers is listed with what is missing."""
    from mirage.core.plugins import build_plugins

    try:
        found = load_registry(registry)
    except ConfigError as error:
        _fail(str(error))
    loaded = build_plugins()
    for name, experiment in found.items():
        typer.echo(f"{name}: {len(experiment.cells())} cells - {experiment.description}")
        try:
            experiment.check(loaded)
        except ConfigError as error:
            typer.echo(f"  cannot start: {error}")


_RUNNER_HELP = "cells run on a local process pool (process), threads (thread) or Ray (ray)"


@app.command()
def sweep(
    experiment: str = typer.Argument(..., help="registry.yaml experiment"),
    grid: list[str] = typer.Option([], "--grid", help='replace or add an axis PATH=JSON_LIST, e.g. env.options.slip="[0, 0.5]"'),
    set_: list[str] = typer.Option([], "--set", help="fix PATH=VALUE in every cell, e.g. steps=5"),
    seeds: Optional[str] = typer.Option(None, help="replicate seeds, comma-separated [default: the experiment's]"),
    preset: Optional[str] = typer.Option(None, help="shrink every cell: tiny"),
    force: bool = typer.Option(False, help="recompute cells that already ran"),
    width: int = typer.Option(2, help="cells at once (1-64)"),
    runner: str = typer.Option("process", help=_RUNNER_HELP),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address [default: a local Ray]"),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
) -> None:
    """Run an experiment's grid in this process (the served deployment does the same)."""
    import os

    from mirage.flows.cells import plan_cells
    from mirage.flows.runners import RUNNERS

    from mirage.flows.runners import check_width
    from mirage.flows.supervise import SUPERVISED, supervise, watch_parent

    if runner not in RUNNERS:
        _fail(f"unknown runner {runner!r}; valid: {', '.join(RUNNERS)}")
    try:
        check_width(width)
    except ConfigError as error:
        _fail(str(error))
    _check_paths(db if db is not None else default_db_path(), None)
    axes, settings = _pairs(grid, "--grid"), _settings(set_)
    for path in axes:
        try:
            setting_type(path, "--grid")
        except ConfigError as error:
            _fail(str(error))
    try:
        seed_list = None if seeds is None else [int(s) for s in seeds.split(",")]
    except ValueError:
        _fail(f"--seeds expects comma-separated integers, got {seeds!r}")
    try:  # validate before Prefect starts
        plan_cells(experiment, registry, grid=axes, settings=settings, seeds=seed_list, preset=preset)
    except ConfigError as error:
        _fail(str(error))
    if not os.environ.get(SUPERVISED):
        # The flow runs in a child process group this process owns: however this process
        # ends (a signal, or SIGKILL via the child's watchdog), the group ends with it.
        argv = ["sweep", experiment, "--width", str(width), "--runner", runner]
        argv += [a for pair in grid for a in ("--grid", pair)] + [a for pair in set_ for a in ("--set", pair)]
        for flag, value in (("--seeds", seeds), ("--preset", preset), ("--ray-address", ray_address),
                            ("--db", db), ("--registry", registry)):
            argv += [flag, str(value)] if value is not None else []
        raise typer.Exit(supervise(argv + (["--force"] if force else [])))
    watch_parent(int(os.environ[SUPERVISED]))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from mirage.flows.sweep import sweep as sweep_flow

    state = sweep_flow(experiment, grid=axes, settings=settings, seeds=seed_list, preset=preset,
                       force=force, width=width, runner=runner, ray_address=ray_address,
                       db=str(db) if db else None, registry=str(registry) if registry else None,
                       return_state=True)
    typer.echo(f"{state.name}: {state.message}")
    raise typer.Exit(0 if state.is_completed() else 1)


@app.command()
def sweeps(
    sweep_id: Optional[str] = typer.Argument(None, help="one sweep (an id or its prefix): every cell"),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    last: int = typer.Option(5, help="how many of the newest sweeps to list"),
) -> None:
    """Progress of the store's sweeps, newest first, while they run: one line per sweep
    with its cell counts, then its running cells (with their step) and failed cells
    (with the reason). With SWEEP_ID, every cell of that sweep. Reads only."""
    from mirage.flows.progress import cell_line, read_sweeps

    target = db if db is not None else default_db_path()
    try:
        check_store_path(target, write=False)
    except ConfigError as error:
        _fail(str(error))
    if last < 1:
        _fail(f"--last {last}: expected a count of at least 1")
    found = read_sweeps(target, last=None if sweep_id else last)
    if sweep_id is not None:
        chosen = [s for s in found if s.sweep_id.startswith(sweep_id)]
        if not chosen:
            known = ", ".join(s.sweep_id for s in found[:10]) or "none"
            _fail(f"no sweep {sweep_id!r} in {target}; sweeps: {known}")
        if len(chosen) > 1:
            _fail(f"sweep {sweep_id!r} is ambiguous: {', '.join(s.sweep_id for s in chosen)}")
        found = chosen
    if not found:
        typer.echo(f"no sweeps in {target}")
    for sweep in found:
        typer.echo(sweep.headline())
        for cell in sweep.cells:
            if sweep_id is not None or cell["status"] in ("running", "failed"):
                typer.echo(f"  {cell_line(cell)}")


@app.command()
def serve(
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    width: int = typer.Option(2, help="cells at once (deployment default)"),
    runner: str = typer.Option("process", help=_RUNNER_HELP),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address [default: a local Ray]"),
    host: str = typer.Option("127.0.0.1", help="local Prefect server host (when PREFECT_API_URL is unset)"),
    port: int = typer.Option(4200, help="local Prefect server port (when PREFECT_API_URL is unset)"),
) -> None:
    """Serve one `sweep` deployment per registry.yaml experiment: run a grid with
    `prefect deployment run sweep/NAME`. Starts a local Prefect server unless
    PREFECT_API_URL names one."""
    from mirage.core.experiments import default_registry_path
    from mirage.flows.runners import RUNNERS
    from mirage.flows.runners import check_width
    from mirage.flows.serve import serve_registry

    if runner not in RUNNERS:
        _fail(f"unknown runner {runner!r}; valid: {', '.join(RUNNERS)}")
    try:
        check_width(width)
    except ConfigError as error:
        _fail(str(error))
    defaults = {
        "db": str((db or default_db_path()).resolve()),
        "registry": str((registry or default_registry_path()).resolve()),
        "width": width, "runner": runner, "ray_address": ray_address,
    }
    try:
        serve_registry(registry, defaults, host, port)
    except ConfigError as error:
        _fail(str(error))
    except RuntimeError as error:
        _fail(str(error))


@app.command()
def report(
    results: Optional[Path] = typer.Option(
        None, help="exported study (Parquet) [default: ./results/reproduction, else the study "
        "shipped with the package]"),
    out: Path = typer.Option(Path("docs/reproduction.md"), help="the report to write"),
    figures: Path = typer.Option(Path("docs/img/reproduction"), help="folder for its figures"),
    notes: Path = typer.Option(Path("results/reproduction.notes.yaml"), help="the researcher's reading of each verdict"),
    from_store: Optional[list[Path]] = typer.Option(None, help="first export the finished runs of the --experiment experiments from this store into --results (repeatable: several stores are merged)"),
    experiment: Optional[list[str]] = typer.Option(None, help="with --from-store: a registry experiment to export (repeatable; default: every study experiment the report reads, 'reproduction', 'collapse' and 'collapse_calibration', those present)"),
    restore: Optional[Path] = typer.Option(None, help="only rebuild a run store at this new path from --results (for `core app --db`)"),
) -> None:
    """Render docs/reproduction.md (tables, figures, verdicts) from the committed study results."""
    from mirage.report.render import build_report
    from mirage.report.results import (
        STUDY_EXPERIMENTS, STUDY_RESULTS, default_results, export_study, restore_study,
    )

    if restore is not None:
        results = results or default_results()
        try:
            restore_study(results, restore)
        except (FileNotFoundError, FileExistsError) as error:
            _fail(str(error))
        typer.echo(f"restored {results} into {restore}")
        return
    if from_store:
        results = results or STUDY_RESULTS  # the export goes where a checkout keeps it
        for store in from_store:
            if not store.exists():
                _fail(f"store {store} does not exist")
        try:
            counts = export_study(from_store, results, experiment or STUDY_EXPERIMENTS)
        except ValueError as error:
            _fail(str(error))
        typer.echo(f"exported {sum(counts.values())} runs to {results} ("
                   + ", ".join(f"{name}: {count}" for name, count in counts.items()) + ")")
    results = results or default_results()
    if not (results / "runs.parquet").exists():
        _fail(f"{results} holds no exported study; run the study and pass --from-store")
    findings = build_report(results, out, figures, notes)
    for finding in findings:
        typer.echo(f"finding {finding.key}: {finding.verdict}")
    typer.echo(f"wrote {out} and its figures in {figures}")


@app.command()
def plugins(
    options: Optional[str] = typer.Option(
        None, "--options", metavar="NAME", help="show component NAME's own options (env, filter, "
        "backend, algorithm, diagnostic or logger) with types, defaults and descriptions"),
) -> None:
    """List loaded plugins: version, hooks implemented, components registered."""
    from mirage.core.options import render_options
    from mirage.core.plugins import build_plugins
    from mirage.core.registry import KINDS

    loaded = build_plugins()
    if options is not None:
        registries = [loaded.registries.of(kind) for kind in KINDS]
        found = [(reg.kind[:-1], reg.get(options)) for reg in registries if options in reg]
        if not found:
            valid = sorted({name for reg in registries for name in reg.names()})
            _fail(f"--options: unknown component {options!r}; valid: {', '.join(valid)}")
        typer.echo("\n".join(render_options(kind, options, cls) for kind, cls in found))
        return
    for info in loaded.infos:
        kind = "built-in" if info.builtin else "entry point"
        typer.echo(f"{info.name} {info.version} ({kind})")
        if info.hooks:
            typer.echo(f"  hooks: {', '.join(info.hooks)}")
        for kind_name, names in sorted(info.components.items()):
            typer.echo(f"  {kind_name}: {', '.join(names)}")


@app.command(name="app")
def app_command(
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    port: Optional[int] = typer.Option(None, help="port to serve on [default: Streamlit's, 8501]"),
    headless: bool = typer.Option(False, help="do not open a browser"),
) -> None:
    """Compare runs in the Streamlit app (opens the store read-only, one query at a time)."""
    import os

    from mirage.app.launch import streamlit_argv

    target = db or default_db_path()
    if target.is_dir():
        _fail(f"--db {str(target)!r} is a directory; expected a DuckDB file")
    if port is not None and not 0 < port < 65536:
        _fail(f"--port {port} is not a port number (1-65535)")
    argv = streamlit_argv(target, port=port, headless=headless)
    os.execv(argv[0], argv)  # Streamlit takes over this process (one pid to stop)


run_commands.register(app)  # runs, show, tag, untag, note, rename, delete, export, diff


def main() -> None:
    app(prog_name="core")


if __name__ == "__main__":
    sys.exit(main())

"""The ``core`` command line: core's own commands, and :func:`build_cli`, which adds every
loaded plugin's (``mirage_register_commands``; the commands of flows, report and app come
that way). It only builds a RunConfig; defaults live in core/config/run_config.py, and the options
that set one config field are declared in core/cli/run_options.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from pluggy import HookImpl

from mirage.core.cli import run_commands
from mirage.core.cli.launched_run import launched
from mirage.core.cli.memory_check import (PLAN_HELP, check_names, check_size, context_tokens_option, device_memory_option,
                                          memory_check)
from mirage.core.cli.common import DB_HELP, REGISTRY_HELP, check_paths, fail, settings
from mirage.core.cli.run_options import PREFLIGHT_OPTIONS, RUN_OPTIONS, GivenOptions, with_config_options
from mirage.core.cli.run_summary import summary_lines
from mirage.core.config.overrides import assign, merged
from mirage.core.config.paths import read_text_file
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.failures import defined_at, raised_at
from mirage.core.plugin_api.hook_calls import raising_impl, running_impl
from mirage.core.plugin_api.loaded_plugins import Plugins
from mirage.core.plugin_api.manager import set_aside_in_this_process
from mirage.core.plugin_api.version import API_VERSION, READS, mirage_version
from mirage.core.run.experiments import load_registry
from mirage.core.run.validate import parse_config
from mirage.core.store.labels import check_label
from mirage.core.store.run_index import find_run
from mirage.core.store.run_store import RunStore, default_db_path

CONFIG_HELP = "JSON/YAML file with a (partial) RunConfig"


def _read_config_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(read_text_file(path, "--config")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"--config {path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of config sections")
    return data


def _start_data(experiment: Optional[str], registry: Optional[Path],
                config_file: Optional[Path]) -> dict[str, Any]:
    """Config data from an experiment's base and a config file (command-line options
    are set on top of it); a copy, never the loaded experiment's own base."""
    data: dict[str, Any] = {}
    try:
        if registry is not None and experiment is None:
            load_registry(registry)  # a bad file is refused even where nothing is looked up
        if experiment is not None:
            experiments = load_registry(registry)
            if experiment not in experiments:
                fail(f"unknown experiment {experiment!r}; valid: {', '.join(sorted(experiments))}")
            data = experiments[experiment].base
        extra = _read_config_file(config_file) if config_file is not None else {}
    except ConfigError as error:
        fail(str(error))
    return merged(data, extra)


def _set_options(data: dict[str, Any], given: GivenOptions, fixed: dict[str, Any] | None = None) -> None:
    """The config options given, then --set (applied last, so it wins)."""
    try:
        given.apply(data)
        for path, value in (fixed or {}).items():
            assign(data, path, value)
    except ConfigError as error:
        fail(str(error))


@with_config_options(RUN_OPTIONS)
def run(
    given: GivenOptions,
    config_file: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
    set_: list[str] = typer.Option(
        [], "--set", help="set any config PATH=VALUE (repeatable, applied last), e.g. "
        "algorithm.clip_ratio_high=0.28; the value is typed by the config"),
    experiment: Optional[str] = typer.Option(None, help="start from this registry.yaml experiment's base config"),
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
    db: Optional[Path] = typer.Option(None, help=DB_HELP),
    resume: Optional[str] = typer.Option(
        None, help="continue RUN_ID (not finished) from its last checkpoint; with --steps N "
        "above its steps, extend a finished run to N steps"),
    name: Optional[str] = typer.Option(None, help="a name for the run (see `core rename`)"),
    tag: list[str] = typer.Option([], "--tag", help="label the run (repeatable; see `core tag`)"),
    note: Optional[str] = typer.Option(None, help="a free-text note on the run (see `core note`)"),
    quiet: bool = typer.Option(False, help="no progress bars (the warm start's included); warnings and the result line still print"),
    nproc: Optional[int] = typer.Option(
        None, help="run data-parallel on N processes (needs --parallel ddp): on this machine "
        "through torchrun's launcher, or N Ray Train workers with --launcher ray (docs/scaling.md)"),
    launcher: Optional[str] = typer.Option(
        None, help="start the processes with torchrun (default; loopback only) or ray (Ray Train "
        "workers on the cluster of --ray-address)"),
    ray_address: Optional[str] = typer.Option(None, help="the Ray cluster of --launcher ray, e.g. "
                                              "ray://head:10001; 'local' starts a local Ray, which listens on every interface"),
    plan: bool = typer.Option(False, "--plan", help=PLAN_HELP),
    device_memory: Optional[str] = device_memory_option(),
    context_tokens: Optional[int] = context_tokens_option(),
) -> None:
    """Run rollout -> score -> diagnose -> filter -> update for --steps iterations.

    --resume continues a run that crashed, failed or stopped from its last checkpoint with
    its stored config: options that would change its training are refused (so are --name,
    --tag and --note: relabel with `core rename/tag/note`); only --steps may extend it."""
    from mirage.core.errors import PluginResultError
    from mirage.core.plugin_api.blame import PluginError
    from mirage.core.run.loop import RunStopped, execute

    target = db if db is not None else default_db_path()
    steps = given.get("--steps")
    check_paths(target, given.get("--model"))
    check_size(device_memory)
    fixed = settings(set_)
    if resume is not None and target.is_file():  # a name or id prefix names the run too
        try:
            resume = find_run(RunStore(target).list_runs(), resume)["run_id"]
        except ConfigError as error:
            fail(f"--resume: {error}")
    if resume is not None:
        changed = [flag for flag in given.flags() if flag != "--steps"]  # --steps extends it
        changed += [flag for flag, value in (("--config", config_file), ("--experiment", experiment),
                                             ("--registry", registry)) if value is not None]
        changed += [f"--set {path}" for path in fixed]
        labels = [flag for flag, value in (("--name", name), ("--tag", tag or None), ("--note", note))
                  if value is not None]
        if changed or labels:
            fail(f"--resume {resume!r} continues the stored config; {', '.join(changed + labels)} cannot "
                 "be changed (only --steps, to extend it" + ("; relabel a run with core rename, "
                 "core tag or core note" if labels else "") + ")")
    try:
        for kind, values in (("name", [name] if name is not None else []), ("tag", tag),
                             ("note", [note] if note is not None else [])):
            for value in values:
                check_label(kind, value)
    except ConfigError as error:
        fail(f"--{kind}: {error}")
    if name is not None:
        if target.is_file():
            run_commands.check_new_name(RunStore(target), name)
    data = _start_data(experiment, registry, config_file)
    _set_options(data, given, fixed)
    if ray_address is not None and launcher != "ray":
        fail("--ray-address names the cluster of --launcher ray; add --launcher ray")
    if ray_address is not None and not ray_address.strip():
        fail("--ray-address: empty; give a cluster address such as ray://head:10001, or 'local'")
    try:
        config = None if resume else parse_config(data)
    except ConfigError as error:
        fail(str(error))
    if config is not None:  # before any work: a run that will not fit is refused here
        memory_check(config, nproc=nproc or 1, device_memory=device_memory, context_tokens=context_tokens,
                     show=plan, required=plan or device_memory is not None)
    try:
        if launcher is not None or (nproc is not None and nproc != 1):  # --nproc 1: this process
            run_id, status, error = launched(
                config, target, nproc=1 if nproc is None else nproc, launcher=launcher, ray_address=ray_address, resume=resume,
                extend_to=steps if resume else None, name=name, tags=tuple(tag), note=note, progress=not quiet)
            if status != "finished":
                typer.echo(f"{'stopped' if status == 'stopped' else 'failed'}: run {run_id}: {error}", err=True)
                raise typer.Exit(1)
        else:
            run_id = execute(config, target, resume=resume, progress=not quiet,
                             extend_to=steps if resume else None, name=name, tags=tuple(tag), note=note)
    except ConfigError as error:
        fail(str(error))
    except RunStopped as error:
        typer.echo(f"stopped: {error}", err=True)
        raise typer.Exit(1)
    except (PluginError, PluginResultError) as error:  # one line; the store's events hold the traceback
        typer.echo(f"failed: {error}", err=True)
        raise typer.Exit(1)
    typer.echo(f"run {run_id} finished; results in {target}")
    if not quiet:
        for line in summary_lines(RunStore(target), run_id):
            typer.echo(line)


@with_config_options(PREFLIGHT_OPTIONS)
def preflight(
    given: GivenOptions,
    config_file: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
    plan: bool = typer.Option(False, "--plan", help=PLAN_HELP.replace("first", "first, for a run of these settings")),
) -> None:
    """One rollout batch with the current policy: is RV filtering likely to help?

    Prints the reward variance (RV) per prompt as a histogram, Std(RV)/Mean(RV), the
    share of zero-variance prompts and the verdict of PAPER.md section 4's predictor."""
    from mirage.core.run.preflight import run_preflight

    check_paths(None, given.get("--model"))
    data = _start_data(None, None, config_file)
    _set_options(data, given)
    try:
        config = parse_config(data)
    except ConfigError as error:
        fail(str(error))
    if plan:
        memory_check(config, show=True)
    try:
        report = run_preflight(config)
    except ConfigError as error:
        fail(str(error))
    typer.echo(report.render())


@with_config_options(RUN_OPTIONS)
def plan(
    given: GivenOptions,
    config_file: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
    set_: list[str] = typer.Option([], "--set", help="set any config PATH=VALUE (repeatable, applied last)"),
    experiment: Optional[str] = typer.Option(None, help="start from this registry.yaml experiment's base config"),
    registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP),
    nproc: int = typer.Option(1, min=1, max=65536, help="processes the run would use (fsdp shards over them)"),
    device_memory: Optional[str] = device_memory_option(),
    context_tokens: Optional[int] = context_tokens_option(),
) -> None:
    """Each rank's planned peak memory for the run these options describe, from the model's
    config.json alone (no weights loaded): a table per component in GiB and the total; with
    --device-memory, whether it fits and, if not, what would (docs/gpu.md). --model may be
    a directory holding only config.json."""
    check_size(device_memory)
    fixed = settings(set_)
    data = _start_data(experiment, registry, config_file)
    _set_options(data, given, fixed)
    try:
        config = parse_config(data)
        from mirage.core.plugin_api.manager import build_plugins

        check_names(config, build_plugins().registries)  # what core run would refuse by name or option
    except ConfigError as error:
        fail(str(error))
    memory_check(config, nproc=nproc, device_memory=device_memory, context_tokens=context_tokens, show=True)


def experiments(registry: Optional[Path] = typer.Option(None, help=REGISTRY_HELP)) -> None:
    """Validate registry.yaml and list its experiments with their cell counts; an
    experiment needing a component no plugin registers is listed with what is missing."""
    from mirage.core.plugin_api.manager import build_plugins

    try:
        found = load_registry(registry)
    except ConfigError as error:
        fail(str(error))
    loaded = build_plugins()
    for name, experiment in found.items():
        try:
            experiment.check(loaded)
            count, problem = len(experiment.cells(loaded)), None
        except ConfigError as error:  # its cells cannot be resolved: count them as listed
            count, problem = experiment.listed_cells(), error
        typer.echo(f"{name}: {count} cells - {experiment.description}")
        if problem is not None:
            typer.echo(f"  cannot start: {problem}")


def plugins(
    options: Optional[str] = typer.Option(
        None, "--options", metavar="NAME", help="show component NAME's own options (env, filter, "
        "backend, algorithm, diagnostic or logger) with types, defaults and descriptions"),
) -> None:
    """List loaded plugins: version, hooks implemented, components registered."""
    from mirage.core.config.options import render_options
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.plugin_api.registry import KINDS

    loaded = build_plugins()
    if options is not None:
        registries = [loaded.registries.of(kind) for kind in KINDS]
        found = [(reg.kind[:-1], reg.get(options)) for reg in registries if options in reg]
        if not found:
            valid = sorted({name for reg in registries for name in reg.names()})
            fail(f"--options: unknown component {options!r}; valid: {', '.join(valid)}")
        typer.echo("\n".join(render_options(kind, options, cls) for kind, cls in found))
        return
    for info in loaded.infos:
        kind = "built-in" if info.builtin else "entry point"
        typer.echo(f"{info.name} {info.version} ({kind})")
        if info.hooks:
            typer.echo(f"  hooks: {', '.join(info.hooks)}")
        for kind_name, names in sorted(info.components.items()):
            typer.echo(f"  {kind_name}: {', '.join(names)}")
        if info.deprecated:
            typer.echo(f"  deprecated: {info.deprecated}")
    for failure in loaded.failed:
        typer.echo(f"{failure.name} (FAILED: set aside, none of its components or hooks are used)")
        typer.echo(f"  {failure.line()}")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"mirage-rl {mirage_version()}")
        typer.echo(f"plugin API {API_VERSION} (loads plugins written for {READS[0]}-{READS[-1]})")
        raise typer.Exit()


def new_cli() -> typer.Typer:
    """An empty ``core`` program (with ``--version``)."""
    cli = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                      help="MIRAGE: multi-turn agent RL with template-collapse diagnostics.")

    @cli.callback()
    def main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                          help="print MIRAGE's version and its plugin API version")) -> None:
        """MIRAGE: multi-turn agent RL with template-collapse diagnostics."""

    return cli


def register(cli: typer.Typer) -> None:
    """Add core's own commands to ``cli``."""
    for command in (run, preflight, plan, experiments, plugins):
        cli.command()(command)
    run_commands.register(cli)  # runs, show, tag, untag, note, rename, delete, export, diff


def build_cli(loaded: Plugins) -> typer.Typer:
    """The ``core`` program: core's own commands, then the loaded plugins', from one pluggy
    call of ``mirage_register_commands`` (wrappers included, in pluggy's order), listed
    plugin by plugin in load order. A third-party plugin whose hook raises or adds a
    command name already taken is set aside (its commands removed, the failure added to
    ``loaded.failed``) and the hook is called again without it; a built-in's error raises,
    and a built-in's name clash raises ConfigError naming both plugins."""
    while True:
        cli = new_cli()
        register(cli)
        failure = _add_plugin_commands(cli, loaded)
        if failure is None:
            return cli
        set_aside_in_this_process(loaded.set_aside(*failure))


def _add_plugin_commands(cli: typer.Typer, loaded: Plugins) -> tuple[str, str, str] | None:
    """Call ``mirage_register_commands`` and add each plugin's commands to ``cli``; the
    (plugin, place, problem) of the first third-party plugin that broke the contract."""
    impls = loaded.hook.mirage_register_commands.get_hookimpls()
    core_commands = cli.registered_commands
    added = cli.registered_commands = _CommandsByPlugin(core_commands, impls)
    try:
        loaded.hook.mirage_register_commands(cli=cli)
    except Exception as error:  # noqa: BLE001 - a third-party plugin is set aside
        impl = raising_impl(error, impls)
        if impl is None or loaded.info(impl.plugin_name).builtin:
            raise
        problem = f"mirage_register_commands raised {type(error).__name__}: {error}"
        return impl.plugin_name, raised_at(error), problem
    finally:
        cli.registered_commands = core_commands
    owners = {name: "mirage.core.cli.program" for name in map(_command_name, core_commands)}
    for info in loaded.infos:
        for command, impl in added.by_plugin.get(info.name, []):
            name = _command_name(command)
            if name in owners:
                problem = f"adds command {name!r}, which {owners[name]!r} already adds"
                if info.builtin:
                    raise ConfigError(f"plugin {info.name!r} {problem}")
                return info.name, defined_at(impl.function), problem
            owners[name] = info.name
            cli.registered_commands.append(command)
    return None


class _CommandsByPlugin(list):
    """``cli.registered_commands`` while the command hook runs: typer's ``cli.command()``
    appends each command here, and it is filed under the plugin whose implementation adds
    it (so a wrapper, after its ``yield``, sees the others' commands too)."""

    def __init__(self, commands: list[Any], impls: list[HookImpl]) -> None:
        super().__init__(commands)
        self.impls = impls
        self.by_plugin: dict[str, list[tuple[Any, HookImpl]]] = {}

    def append(self, command: Any) -> None:
        impl = running_impl(self.impls)
        if impl is None:
            raise RuntimeError("a command added outside a mirage_register_commands implementation")
        self.by_plugin.setdefault(impl.plugin_name, []).append((command, impl))
        super().append(command)


def _command_name(command: Any) -> str:
    return command.name or typer.main.get_command_name(command.callback.__name__)


app = new_cli()  # core's own commands only (tests drive them in-process)
register(app)

"""The options of ``core run`` and ``core preflight`` that set one config field, declared
once: :data:`RUN_OPTIONS` maps each flag to its config path, and this table is the only
place a flag's path is named. An option's help is its field's ``description`` and its
default the field's default (mirage/core/config/run_config.py), so neither is written twice; a flag
moves with its field by editing one line here.

:func:`with_config_options` adds a table's options to a command, which receives those
given on the command line as one :class:`GivenOptions` (``core run --resume`` refuses
them all but ``--steps``). A command's other options (files, the store, labels) are its
own parameters.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Optional, get_args, get_origin

import typer
from pydantic.fields import FieldInfo

from mirage.core.config.overrides import assign, raw_pairs
from mirage.core.config.run_config import RunConfig


@dataclass(frozen=True)
class ConfigOption:
    """``flag`` sets the config field at ``path``; a bool field's flag has an ``off`` twin.

    A path under a component's own options (``filter.options.mode``) names the
    ``component`` that declares it and restates its ``description``: the component is a
    plugin, whose Options core cannot import (tests/core/test_run_options.py keeps the
    two equal)."""

    flag: str
    path: str
    off: str | None = None
    component: str | None = None
    description: str | None = None

    def __post_init__(self) -> None:
        if (self.component is None) != (self.description is None):
            raise ValueError(f"{self.flag}: a component's option needs both component and description")

    @property
    def name(self) -> str:
        """The command function's parameter (``--group-size``: ``group_size``)."""
        return self.flag.removeprefix("--").replace("-", "_")

    def field(self) -> FieldInfo:
        """The pydantic field at ``path``: its type, description and default."""
        *sections, leaf = self.path.split(".")
        model: Any = RunConfig
        try:
            for section in sections:
                model = model.model_fields[section].annotation
            return model.model_fields[leaf]
        except (AttributeError, KeyError):
            raise LookupError(f"{self.flag}: {self.path!r} names no RunConfig field") from None

    def annotation(self) -> Any:
        """The field's type; a component's option is read as text (its Options checks it)."""
        return str if self.component is not None else self.field().annotation

    def default(self) -> Any:
        """The config's default; None for a component's option (its Options holds it)."""
        if self.component is not None:
            return None
        return functools.reduce(getattr, self.path.split("."), _defaults())

    @property
    def repeatable(self) -> bool:
        return get_origin(self.annotation()) in (list, dict)

    def help(self) -> str:
        """The field's description, then what the command line adds: ``[repeatable]`` or
        the default (bool: the flag that holds by default; a component's option: where
        its default is shown)."""
        if self.component is not None:
            return f"{self.description}  [default: see core plugins --options {self.component}]"
        description = self.field().description
        if not description:
            raise LookupError(f"{self.flag}: config field {self.path!r} has no description")
        default = self.default()
        if self.repeatable:
            return f"{description}  [repeatable]"
        if self.off is not None:
            return f"{description}  [default: {(self.flag if default else self.off).removeprefix('--')}]"
        return description if default is None else f"{description}  [default: {default}]"

    def parameter(self) -> inspect.Parameter:
        """The typer parameter: None (or empty) when the option is not given, so a config
        file's or an experiment's value stays."""
        kind = self.annotation()
        decls = [f"{self.flag}/{self.off}" if self.off else self.flag]
        metavar = None
        if get_origin(kind) is dict:
            annotation, default, metavar = list[str], [], "<key=value>"
        elif get_origin(kind) is list:
            annotation, default, metavar = kind, [], f"<{get_args(kind)[0].__name__}>"
        else:
            annotation, default = Optional[_scalar(kind)], None
            if get_origin(kind) is Literal:
                metavar = f"<{'|'.join(get_args(kind))}>"
        option = typer.Option(default, *decls, help=self.help(), metavar=metavar)
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                 annotation=annotation)

    def config_value(self, given: Any) -> Any:
        """The value the option's command-line form stands for (``--env-opt slip=0.1``:
        ``{"slip": 0.1}``); ConfigError for a malformed one."""
        if get_origin(self.annotation()) is dict:
            return raw_pairs(given, self.flag, "KEY=VALUE")
        return given


@functools.cache
def _defaults() -> RunConfig:
    return RunConfig()


def _scalar(kind: Any) -> type:
    """The command-line type of a scalar field: ``T | None`` is read as T, a Literal as
    text (the config then refuses a bad choice naming its path and the valid ones)."""
    if get_origin(kind) is Literal:
        return str
    args = [arg for arg in get_args(kind) if arg is not type(None)]
    return args[0] if len(args) == 1 else kind


RUN_OPTIONS: tuple[ConfigOption, ...] = (
    ConfigOption("--env", "env.name"),
    ConfigOption("--env-opt", "env.options"),
    ConfigOption("--filter", "filter.name"),
    ConfigOption("--rho", "filter.rho"),
    ConfigOption("--filter-mode", "filter.options.mode", component="top_p", description=(
        "accumulate sorted scores (linear) or nucleus selection over softmax(scores) (softmax, "
        "the paper's main table)")),
    ConfigOption("--filter-score", "filter.score"),
    ConfigOption("--keep", "filter.keep"),
    ConfigOption("--include-zero", "filter.include_zero", off="--exclude-zero"),
    ConfigOption("--loss-scaling", "loss_scaling"),
    ConfigOption("--step-size-matching", "step_size_matching", off="--no-step-size-matching"),
    ConfigOption("--max-empty-steps", "max_empty_steps"),
    ConfigOption("--algo", "algorithm.name"),
    ConfigOption("--steps", "steps"),
    ConfigOption("--seed", "seed"),
    ConfigOption("--model", "model.path"),
    ConfigOption("--backend", "model.backend"),
    ConfigOption("--parallel", "model.parallel"),
    ConfigOption("--prompts", "rollout.prompts"),
    ConfigOption("--group-size", "rollout.group_size"),
    ConfigOption("--temperature", "rollout.temperature"),
    ConfigOption("--lr", "algorithm.lr"),
    ConfigOption("--entropy-coef", "algorithm.entropy_coef"),
    ConfigOption("--kl-coef", "algorithm.kl_coef"),
    ConfigOption("--val-every", "validation.every"),
    ConfigOption("--val-episodes", "validation.episodes"),
    ConfigOption("--logger", "loggers.names"),
)


def options(*flags: str) -> tuple[ConfigOption, ...]:
    """The options of :data:`RUN_OPTIONS` with these flags, in this order."""
    table = {option.flag: option for option in RUN_OPTIONS}
    unknown = [flag for flag in flags if flag not in table]
    if unknown:
        raise LookupError(f"not in RUN_OPTIONS: {', '.join(unknown)}")
    return tuple(table[flag] for flag in flags)


PREFLIGHT_OPTIONS = options("--env", "--env-opt", "--seed", "--model", "--prompts", "--group-size")
# core probe (mirage/probe/commands.py) takes --model its own way: repeatable, and RUN@STEP
PROBE_OPTIONS = options("--env", "--env-opt", "--seed", "--backend", "--prompts", "--group-size",
                        "--temperature")


@dataclass(frozen=True)
class GivenOptions:
    """The table's options given on the command line, with their values as typed."""

    values: tuple[tuple[ConfigOption, Any], ...]

    def flags(self) -> list[str]:
        return [option.flag for option, _ in self.values]

    def get(self, flag: str) -> Any:
        """The value given for ``flag``, or None."""
        return next((value for option, value in self.values if option.flag == flag), None)

    def apply(self, data: dict[str, Any]) -> None:
        """Set each given option's field in config data; ConfigError for a bad value."""
        for option, value in self.values:
            assign(data, option.path, option.config_value(value))


def with_config_options(
        table: tuple[ConfigOption, ...]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the ``table``'s options, before its own. The command's first
    parameter, ``given``, receives the :class:`GivenOptions`."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = list(inspect.signature(command, eval_str=True).parameters.values())
        if not own or own[0].name != "given":
            raise TypeError(f"{command.__name__}: the first parameter must be `given`")
        own = own[1:]
        clash = {p.name for p in own} & {option.name for option in table}
        if clash:
            raise TypeError(f"{command.__name__}: {', '.join(sorted(clash))} also in the table")

        @functools.wraps(command)
        def with_options(**values: Any) -> Any:
            given = tuple((option, value) for option in table
                          if (value := values.pop(option.name)) not in (None, [], ()))
            return command(GivenOptions(given), **values)

        parameters = [option.parameter() for option in table]
        parameters += [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        with_options.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        return with_options

    return decorate

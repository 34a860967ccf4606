"""Checks a run configuration against the registries before any work starts."""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ValidationError

from mirage.core.config import RunConfig
from mirage.core.options import options_class
from mirage.core.plugins import Plugins
from mirage.core.registry import UnknownComponentError


class ConfigError(ValueError):
    """A bad configuration value; the message is one line naming it."""


def one_line(error: ValidationError, prefix: str = "") -> str:
    """The first pydantic error as ``field: message (got value)``."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "config"
    message = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    shown = "" if isinstance(got, dict) or got is None else f" (got {got!r})"
    return f"invalid {prefix}{where}: {message}{shown}"


def build_config(data: dict[str, Any]) -> RunConfig:
    """A RunConfig from nested plain data, with one-line errors."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(one_line(error)) from None


def component_options(cls: type, given: Mapping[str, Any], kind: str, name: str, where: str) -> BaseModel:
    """``cls.Options`` built from ``given`` (found at config path ``where``). Raises
    ConfigError in one line: an unknown option names the component and lists the valid
    ones; a bad value names its path."""
    options_cls = options_class(cls)
    valid = list(options_cls.model_fields)
    for key in given:
        if key not in valid:
            raise ConfigError(f"unknown option {key!r} for {kind} {name!r} ({where}{key}); "
                              f"valid: {', '.join(valid) or '(none)'}")
    try:
        return options_cls(**given)
    except ValidationError as error:
        raise ConfigError(one_line(error, prefix=where)) from None


def validate_config(config: RunConfig, plugins: Plugins) -> Any:
    """Raise ConfigError unless every name resolves and every value fits (each chosen
    component's options included, mirage/core/options.py); return the environment's
    validated options."""
    reg = plugins.registries
    try:
        env_cls = reg.envs.get(config.env.name)
        backend_cls = reg.backends.get(config.model.backend)
        algorithm_cls = reg.algorithms.get(config.algorithm.name)
        filter_cls = reg.filters.get(config.filter.name)
        for name in config.diagnostics.names:
            reg.diagnostics.get(name)
        for name in [*config.loggers.names, *config.loggers.options]:
            reg.loggers.get(name)
    except UnknownComponentError as error:
        raise ConfigError(str(error)) from None
    options = component_options(env_cls, config.env.options, "env", config.env.name, "env.options.")
    component_options(filter_cls, config.filter.options, "filter", config.filter.name, "filter.options.")
    component_options(backend_cls, config.model.options, "backend", config.model.backend, "model.options.")
    component_options(algorithm_cls, config.algorithm.options, "algorithm", config.algorithm.name,
                      "algorithm.options.")
    # e.g. DeepCoder refuses to run model-written code where its sandbox cannot isolate it
    if problem := env_cls.options_problem(options):
        raise ConfigError(f"{config.env.name}: {problem}")
    if filter_cls.requires_variance and config.rollout.group_size < 2:
        raise ConfigError(
            f"filter {config.filter.name!r} ranks prompts by reward variance, which needs "
            f"group size >= 2 (got {config.rollout.group_size})"
        )
    if problem := backend_cls.config_problem(config):
        raise ConfigError(problem)
    # e.g. PPO's GAE needs a backend that provides a critic
    if problem := algorithm_cls.config_problem(config, backend_cls):
        raise ConfigError(problem)
    for name in dict.fromkeys([*config.loggers.names, *config.loggers.options]):
        logger_options(config, plugins, name)
    for name in config.loggers.names:  # a missing library fails now, not mid-run
        if problem := reg.loggers.get(name).missing_requirement():
            raise ConfigError(f"logger {name!r}: {problem}")
    return options


def logger_options(config: RunConfig, plugins: Plugins, name: str) -> Any:
    """Logger ``name``'s ``Options`` built from ``loggers.options[name]`` (ConfigError if
    they do not fit)."""
    logger_cls = plugins.registries.loggers.get(name)
    return component_options(logger_cls, config.loggers.options.get(name, {}), "logger", name,
                             f"loggers.options.{name}.")

"""A run configuration meets the registries before any work starts: the algorithm section's
unset settings are resolved from the chosen components, then every name and value is
checked."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pydantic import BaseModel, ValidationError

from mirage.core.config.legacy import MOVED
from mirage.core.config.options import options_class
from mirage.core.config.run_config import AlgorithmConfig, RunConfig
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.legacy import build_legacy
from mirage.core.plugin_api.manager import Plugins, build_plugins
from mirage.core.plugin_api.registry import Registries, UnknownComponentError
from mirage.core.plugin_api.version import GENERATION


def one_line(error: ValidationError, prefix: str = "") -> str:
    """The first pydantic error as ``field: message (got value)``; a setting of an earlier
    layout is named with the path it has now."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "config"
    message = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    shown = "" if isinstance(got, dict) or got is None else f" (got {got!r})"
    if first["type"] == "extra_forbidden" and f"{prefix}{where}" in MOVED:
        shown += f"; it moved to {MOVED[prefix + where][0]}"
    return f"invalid {prefix}{where}: {message}{shown}"


def parse_config(data: dict[str, Any]) -> RunConfig:
    """A RunConfig from nested plain data, with one-line errors; not yet resolved (the run
    resolves it when it validates it with its plugins, :func:`validate_config`)."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(one_line(error)) from None


def build_config(data: dict[str, Any], plugins: Plugins | None = None) -> RunConfig:
    """A resolved RunConfig (:func:`resolve_algorithm`) from nested plain data, with one-line
    errors. ``plugins``: the registries to resolve with (None: the default plugins)."""
    config = parse_config(data)
    resolve_algorithm(config, (plugins or build_plugins()).registries)
    return config


def resolve_algorithm(config: RunConfig, registries: Registries) -> None:
    """Fill, in place, every unset (None) setting of ``config.algorithm``: from the chosen
    algorithm class's ``preset``, then from the chosen advantage estimator's ``defaults``,
    then :meth:`AlgorithmConfig.fill_generic`. Resolving a resolved config changes
    nothing. Raises ConfigError for an unknown algorithm or estimator (listing the valid
    ones), a preset naming a setting that does not exist, or a value that does not fit."""
    algo = config.algorithm
    try:
        algorithm_cls = registries.algorithms.get(algo.name)
        data = _unset_filled(algo.model_dump(), algorithm_cls.preset,
                             f"algorithm {algo.name!r}'s preset")
        if (estimator := data["adv_estimator"]) is not None:
            data = _unset_filled(data, registries.estimators.get(estimator).defaults,
                                 f"estimator {estimator!r}'s defaults")
    except UnknownComponentError as error:
        raise ConfigError(str(error)) from None
    try:
        resolved = AlgorithmConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(one_line(error, prefix="algorithm.")) from None
    resolved.fill_generic(config.rollout.max_new_tokens)
    buffer = resolved.overlong_buffer
    if buffer is not None and buffer > config.rollout.max_new_tokens:
        raise ConfigError(f"algorithm.overlong_buffer ({buffer}) exceeds rollout.max_new_tokens "
                          f"({config.rollout.max_new_tokens})")
    config.algorithm = resolved


def _unset_filled(data: dict[str, Any], values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``data`` with its None entries set from ``values`` (whose keys must be fields)."""
    valid = list(AlgorithmConfig.model_fields)
    for key in values:
        if key not in valid:
            raise ConfigError(f"{source} sets {key!r}, which is no algorithm setting; "
                              f"valid: {', '.join(valid)}")
    return data | {key: value for key, value in values.items() if data[key] is None}


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


# Per kind: its registry, and where the run config holds the chosen component's options:
# its section's ``options`` for a kind the run chooses one of, ``options[name]`` for a kind
# it names a list of.
OPTIONS_AT: dict[str, tuple[str, str, Callable[[RunConfig, str], Mapping[str, Any]]]] = {
    "env": ("envs", "env.options.", lambda config, name: config.env.options),
    "backend": ("backends", "model.options.", lambda config, name: config.model.options),
    "algorithm": ("algorithms", "algorithm.options.", lambda config, name: config.algorithm.options),
    "filter": ("filters", "filter.options.", lambda config, name: config.filter.options),
    "diagnostic": ("diagnostics", "diagnostics.options.{name}.",
                   lambda config, name: config.diagnostics.options.get(name, {})),
    "logger": ("loggers", "loggers.options.{name}.",
               lambda config, name: config.loggers.options.get(name, {})),
}


def chosen_options(config: RunConfig, registries: Registries, kind: str, name: str) -> BaseModel:
    """The ``Options`` of ``kind`` component ``name`` built from what ``config`` gives for
    it (ConfigError if they do not fit)."""
    registry, where, given = OPTIONS_AT[kind]
    cls = getattr(registries, registry).get(name)
    return component_options(cls, given(config, name), kind, name, where.format(name=name))


def build_component(config: RunConfig, registries: Registries, kind: str, name: str) -> Any:
    """The run's ``kind`` component ``name``, built the one way every kind is:
    ``cls(config, options)`` (:class:`mirage.core.config.options.Component`), or, for a
    plugin written for plugin API 1, that release's way (mirage/core/plugin_api/legacy.py)."""
    registry = getattr(registries, OPTIONS_AT[kind][0])
    cls = registry.get(name)
    options = chosen_options(config, registries, kind, name)
    if registry.generation(name) < GENERATION:
        return build_legacy(kind, cls, config, options)
    return cls(config, options)


def chosen_components(config: RunConfig, reg: Registries) -> tuple[Any, Any, Any, Any]:
    """The environment, backend, algorithm and filter classes ``config`` names; ConfigError
    naming the valid choices where one of them, or a diagnostic or logger, is not registered."""
    try:
        found = (reg.envs.get(config.env.name), reg.backends.get(config.model.backend),
                 reg.algorithms.get(config.algorithm.name), reg.filters.get(config.filter.name))
        for name in [*config.diagnostics.names, *config.diagnostics.options]:
            reg.diagnostics.get(name)
        for name in [*config.loggers.names, *config.loggers.options]:
            reg.loggers.get(name)
    except UnknownComponentError as error:
        raise ConfigError(str(error)) from None
    return found


def validate_config(config: RunConfig, plugins: Plugins) -> Any:
    """Resolve ``config``'s algorithm section in place (:func:`resolve_algorithm`), then raise
    ConfigError unless every name resolves and every value fits (each chosen component's
    options included, mirage/core/config/options.py); return the environment's validated options."""
    reg = plugins.registries
    resolve_algorithm(config, reg)
    env_cls, backend_cls, algorithm_cls, filter_cls = chosen_components(config, reg)
    if "observation" in config.env.options and "observation" not in env_cls.Options.model_fields:
        seeing = sorted(name for name in reg.envs.names() if "observation" in reg.envs.get(name).Options.model_fields)
        raise ConfigError(f"env {config.env.name!r} has no image observations (env.options.observation); "
                          f"environments that show pictures: {', '.join(seeing) or 'none'}")
    options = chosen_options(config, reg, "env", config.env.name)
    if getattr(options, "observation", "text") == "image" and (problem := backend_cls.images_problem(config)):
        raise ConfigError(problem)
    for kind, name in [("backend", config.model.backend), ("algorithm", config.algorithm.name),
                       ("filter", config.filter.name)]:
        chosen_options(config, reg, kind, name)
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
    modes = backend_cls.parallel_modes
    if config.model.parallel != "none" and config.model.parallel not in modes:
        raise ConfigError(
            f"model.parallel {config.model.parallel!r}: backend {config.model.backend!r} runs only "
            f"in one process (its parallel modes: {', '.join(modes) or 'none'}); use model.parallel: none")
    estimator = config.algorithm.adv_estimator
    needs_critic = estimator is not None and reg.estimators.get(estimator).needs_critic
    if needs_critic and not backend_cls.supports_critic:
        raise ConfigError(
            f"algorithm {config.algorithm.name!r} estimates advantages with {estimator!r}, which "
            f"needs a critic, but backend {config.model.backend!r} provides none; use --algo grpo, "
            "drgrpo or dapo, or set algorithm.adv_estimator: grpo"
        )
    if problem := algorithm_cls.config_problem(config, backend_cls):
        raise ConfigError(problem)
    for name in dict.fromkeys([*config.diagnostics.names, *config.diagnostics.options]):
        chosen_options(config, reg, "diagnostic", name)
    for name in config.diagnostics.names:
        if problem := reg.diagnostics.get(name).config_problem(config):
            raise ConfigError(problem)
    for name in dict.fromkeys([*config.loggers.names, *config.loggers.options]):
        chosen_options(config, reg, "logger", name)
    for name in config.loggers.names:  # a missing library fails now, not mid-run
        if problem := reg.loggers.get(name).missing_requirement():
            raise ConfigError(f"logger {name!r}: {problem}")
    return options

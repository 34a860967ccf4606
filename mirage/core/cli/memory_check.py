"""The memory plan on the command line: ``core plan`` and ``core run``'s ``--plan`` print
it (mirage/core/memory/); ``--device-memory`` (or, on a GPU, its free memory) refuses a
run that will not fit before any work, naming the settings that would."""

from __future__ import annotations

from typing import Optional

import typer

from mirage.core.cli.common import fail
from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.memory.run_plan import device_limit, engine_share, refusal, run_plan

PLAN_HELP = "print each rank's planned peak memory (weights, gradients, optimizer, activations, KV cache, reference, critic) first"
DEVICE_MEMORY_HELP = ("refuse, before any work, a run whose planned peak per rank is above this size "
                      "(e.g. 24GB, 22.5GiB); default: a GPU's free memory, no limit on the CPU")
CONTEXT_HELP = ("the plan's prompt length per turn in tokens [default: 216 with the instruction shown (a "
                "pretrained --model), else 128; plus a response and 64 per shown history turn]")


def device_memory_option():
    return typer.Option(None, "--device-memory", metavar="SIZE", help=DEVICE_MEMORY_HELP)


def context_tokens_option():
    return typer.Option(None, "--context-tokens", min=1, max=1_000_000, help=CONTEXT_HELP)


def check_names(config: RunConfig, registries) -> None:
    """ConfigError for what ``core run`` would refuse by name or option (the environment,
    backend, algorithm, filter, diagnostics and loggers, and each chosen component's
    options) or an empty ``--model``; the checks that need the run's machine (an installed
    engine, the weights) are not a plan's."""
    from mirage.core.run.validate import chosen_components, chosen_options

    if config.model.path is not None and not str(config.model.path).strip():
        raise ConfigError("--model '': give a checkpoint directory, a hub id or a .gguf file")
    chosen_components(config, registries)
    for kind, name in [("env", config.env.name), ("backend", config.model.backend),
                       ("algorithm", config.algorithm.name), ("filter", config.filter.name)]:
        chosen_options(config, registries, kind, name)


def check_size(device_memory: Optional[str]) -> None:
    """Refuse a ``--device-memory`` that is not a size (one line, exit 2) before anything loads."""
    if device_memory is not None:
        try:
            device_limit(device_memory, "cpu")
        except ConfigError as error:
            fail(str(error))


def memory_check(config: RunConfig, *, nproc: int = 1, device_memory: Optional[str] = None,
                 context_tokens: Optional[int] = None, show: bool = False, required: bool = True) -> None:
    """Print ``config``'s plan (``show``) and refuse it (one line, exit 2) when over the
    device's memory. ``required=False`` (the GPU's own limit, nothing asked for): a model
    whose shape cannot be read is not planned, and the run goes on."""
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.run.validate import resolve_algorithm

    try:
        limit = device_limit(device_memory, config.model.device)
        if limit is None and not show:  # on the CPU nothing is asked: no plan, no cost
            return
        resolved = RunConfig.model_validate(config.model_dump())
        registries = build_plugins().registries
        resolve_algorithm(resolved, registries)
        plan = run_plan(resolved, registries, ranks=max(1, nproc), context=context_tokens)
        if limit is not None:  # the vllm backend's engine holds its share (its weights and KV cache) apart
            limit = limit.less_engine(engine_share(resolved, registries))
    except ConfigError as error:
        if not required:
            return
        fail(str(error))
    if show:
        typer.echo(plan.render(None if limit is None else limit.bytes))
    if limit is not None and (problem := refusal(plan, limit)):
        fail(problem)

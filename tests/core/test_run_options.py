"""``core run`` and ``core preflight`` take their config options from one table
(mirage/core/cli/run_options.py): every option either sets a config path named there, with its
field's description as help, or is one of the few listed here that set no config field."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from mirage.core.cli.program import app
from mirage.core.cli.run_options import RUN_OPTIONS, ConfigOption, GivenOptions, options
from mirage.core.config.overrides import setting_type

# Options that set no config field: where the config comes from, where the run goes, how
# it is labelled and shown. A new option belongs in RUN_OPTIONS unless it is one of these.
NOT_CONFIG = {
    "run": {"--config", "--set", "--experiment", "--registry", "--db", "--resume", "--name",
            "--tag", "--note", "--quiet", "--nproc", "--launcher", "--ray-address",
            "--plan", "--device-memory", "--context-tokens"},  # the memory plan's (core plan's too)
    "preflight": {"--config", "--plan"},
    "plan": {"--config", "--set", "--experiment", "--registry", "--nproc", "--device-memory", "--context-tokens"},
}
CLI_SUFFIX = re.compile(r"  \[(default: [^\]]+|repeatable)\]$")


def command_options(command: str) -> dict[str, object]:
    """``--flag`` -> click parameter of every option of ``core COMMAND`` (but --help)."""
    params = typer.main.get_command(app).commands[command].params
    return {param.opts[0]: param for param in params if param.opts[0] != "--help"}


@pytest.mark.parametrize("command", sorted(NOT_CONFIG))
def test_every_option_sets_a_config_path_or_is_listed_as_setting_none(command):
    table = {option.flag: option for option in RUN_OPTIONS}
    unexplained = set(command_options(command)) - set(table) - NOT_CONFIG[command]
    assert not unexplained, (f"core {command} options with no config path: {sorted(unexplained)}; "
                             "add them to RUN_OPTIONS (mirage/core/cli/run_options.py)")
    for flag in set(command_options(command)) & set(table):
        setting_type(table[flag].path)  # a config path --set would take too


@pytest.mark.parametrize("command", sorted(NOT_CONFIG))
def test_the_help_of_a_config_option_is_its_fields_description(command):
    table = {option.flag: option for option in RUN_OPTIONS}
    for flag, param in command_options(command).items():
        if flag in NOT_CONFIG[command]:
            continue
        option = table[flag]
        description = option.description if option.component else option.field().description
        assert description, f"{flag}: {option.path} has no description in mirage/core/config/run_config.py"
        assert CLI_SUFFIX.sub("", param.help) == description, flag


# The way an option of one component's own options is declared (none in RUN_OPTIONS is,
# so far): shown on the quartile filter's.
QUARTILE = ConfigOption("--quartile", "filter.options.quartile", component="quartile",
                        description="train only on this reward-score quartile of the batch (1: "
                        "highest, 4: lowest), a quarter of the prompts (PAPER.md section 5)")
SECTION_KINDS = {"env": "envs", "filter": "filters", "model": "backends", "algorithm": "algorithms"}


@pytest.mark.parametrize("option", [o for o in RUN_OPTIONS if o.component] + [QUARTILE],
                         ids=lambda o: o.flag)
def test_a_components_option_restates_its_options_description(option):
    from mirage.core.config.options import options_class
    from mirage.core.plugin_api.manager import build_plugins

    section, options_field, key = option.path.split(".")
    assert options_field == "options"
    cls = build_plugins().registries.of(SECTION_KINDS[section]).get(option.component)
    assert option.description == options_class(cls).model_fields[key].description
    assert option.help().endswith(f"  [default: see core plugins --options {option.component}]")
    data: dict = {}
    GivenOptions(((option, "2"),)).apply(data)
    assert data == {section: {"options": {key: "2"}}}  # typed by the component's Options


def test_the_table_names_each_flag_and_path_once():
    flags = [option.flag for option in RUN_OPTIONS] + [o.off for o in RUN_OPTIONS if o.off]
    paths = [option.path for option in RUN_OPTIONS]
    assert len(flags) == len(set(flags))
    assert len(paths) == len(set(paths))


def test_a_bool_option_has_an_off_flag_and_shows_the_one_that_holds():
    for option in RUN_OPTIONS:
        assert (option.off is not None) == (option.annotation() is bool), option.flag
    (include_zero,) = options("--include-zero")
    assert include_zero.help().endswith("[default: exclude-zero]")


def test_given_options_land_on_their_config_paths():
    env, env_opt, logger, include_zero = options("--env", "--env-opt", "--logger", "--include-zero")
    data: dict = {"env": {"options": {"size": 4}}}
    GivenOptions(((env, "frozenlake"), (env_opt, ["slip=0.1"]), (logger, ["wandb"]),
                  (include_zero, False))).apply(data)
    assert data == {"env": {"name": "frozenlake", "options": {"size": 4, "slip": 0.1}},
                    "loggers": {"names": ["wandb"]}, "filter": {"include_zero": False}}


def _given(option) -> list[str]:
    """The option on a command line, with a value of its type."""
    if option.off is not None:
        return [option.flag]
    if option.repeatable:
        return [option.flag, "key=1" if option.flag == "--env-opt" else "wandb"]
    default = option.default()
    return [option.flag, "org/model" if default is None else str(default)]


@pytest.mark.parametrize("option", [o for o in RUN_OPTIONS if o.flag != "--steps"], ids=lambda o: o.flag)
def test_resume_refuses_every_config_option_but_steps(option, populated_store):
    result = CliRunner().invoke(app, ["run", "--resume", "existing", "--db", str(populated_store),
                                      *_given(option)])
    assert result.exit_code == 2, result.output
    assert f"; {option.flag} cannot be changed (only --steps" in result.stderr

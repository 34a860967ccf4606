"""Components own their options (issue #21): a class declares ``Options``, the run config
holds the chosen component's settings in its section (``filter.options``,
``model.options``, ``algorithm.options``; by name for the diagnostics a run lists,
``diagnostics.options[name]``, since #34), validation checks them against the class, and
``core plugins --options NAME`` shows them. A throwaway third-party filter proves it works
without any change to core."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from mirage.core.cli.program import app
from mirage.core.errors import ConfigError
from mirage.core.plugin_api import manager as plugins_module
from mirage.core.plugin_api.components import Filter
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.batch import Selection
from mirage.core.run import loop
from mirage.core.run.validate import build_component, build_config, validate_config
from mirage.core.store.run_store import RunStore


class FirstGroupsFilter(Filter):
    """Keeps the first ``count`` prompt groups of the batch (a throwaway plugin's filter)."""

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        count: int = Field(2, ge=1, description="groups kept, from the first")

    def select(self, batch):
        return Selection(list(range(min(self.options.count, len(batch.groups)))))


@pytest.fixture
def first_groups(make_plugins):
    return make_plugins("first_groups_plugin", filters={"first_groups": FirstGroupsFilter})


def invoke(*args: str):
    return CliRunner().invoke(app, [str(arg) for arg in args])


@pytest.mark.parametrize("count", [1, 2])
def test_a_third_party_filter_option_set_on_the_command_line_reaches_the_filter(
        count, first_groups, monkeypatch, tiny_config_file, tmp_path):
    monkeypatch.setattr(loop, "build_plugins", lambda: first_groups)
    db = tmp_path / "runs.duckdb"
    result = invoke("run", "--config", tiny_config_file, "--quiet", "--filter", "first_groups",
                    "--steps", "2", "--db", db, "--set", f"filter.options.count={count}")
    assert result.exit_code == 0, result.output
    (row,) = RunStore(db).list_runs()
    assert row["config"]["filter"]["options"] == {"count": count}
    trained = [g for g in RunStore(db).groups(row["run_id"]) if g["step"] >= 1]  # step 0: before training
    assert {g["step"] for g in trained} == {1, 2}
    kept = sorted((g["step"], g["prompt_index"]) for g in trained if g["kept"])
    assert kept == [(step, index) for step in (1, 2) for index in range(count)]


def test_an_unknown_option_is_refused_naming_it_the_component_and_the_valid_options(
        first_groups, monkeypatch, tiny_config_file, tmp_path):
    monkeypatch.setattr(loop, "build_plugins", lambda: first_groups)
    db = tmp_path / "runs.duckdb"
    result = invoke("run", "--config", tiny_config_file, "--filter", "first_groups", "--db", db,
                    "--set", "filter.options.cuont=1")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: unknown option 'cuont' for filter 'first_groups' (filter.options.cuont); valid: count"]
    assert not db.exists()


def test_a_bad_option_value_names_its_path(first_groups, tiny_config):
    config = build_config(tiny_config() | {"filter": {"name": "first_groups", "options": {"count": 0}}})
    with pytest.raises(ConfigError, match=r"^invalid filter\.options\.count: Input should be greater than "
                                          r"or equal to 1 \(got 0\)$"):
        validate_config(config, first_groups)


@pytest.mark.parametrize("section, kind, name", [
    ("filter", "filter", "top_p"), ("algorithm", "algorithm", "grpo"), ("env", "env", "frozenlake")])
def test_a_component_without_the_option_refuses_it(section, kind, name, first_groups, tiny_config):
    data = tiny_config()
    data.setdefault(section, {})["options"] = {"count": 1}
    data[section]["name"] = name
    with pytest.raises(ConfigError, match=rf"^unknown option 'count' for {kind} '{name}' "
                                          rf"\({section}\.options\.count\); valid: "):
        validate_config(build_config(data), first_groups)


def test_core_plugins_options_shows_types_defaults_and_descriptions(first_groups, monkeypatch):
    monkeypatch.setattr(plugins_module, "build_plugins", lambda: first_groups)
    result = invoke("plugins", "--options", "first_groups")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "filter first_groups: 1 option", "  count: int = 2  groups kept, from the first"]


def test_core_plugins_options_lists_the_valid_names_for_an_unknown_one(first_groups, monkeypatch):
    monkeypatch.setattr(plugins_module, "build_plugins", lambda: first_groups)
    result = invoke("plugins", "--options", "first_group")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --options: unknown component 'first_group'; valid: ")
    assert {"first_groups", "top_p", "frozenlake", "grpo", "local", "wandb"} <= set(
        line.split("valid: ")[1].split(", "))


# --------------------------------------------------------------------------- diagnostics (#34)


def test_a_diagnostic_takes_its_options_by_name(tiny_config):
    """Diagnostics, like loggers, are a list the run names: each one's options are
    ``diagnostics.options[name]``, built into the diagnostic as ``cls(config, options)``."""
    plugins = build_plugins()
    config = build_config(tiny_config() | {"diagnostics": {"names": ["mi", "grad"], "options": {
        "mi": {"scopes": ["trajectory"], "trajectory_samples": 4}, "grad": {"every": 3}}}})
    validate_config(config, plugins)
    mi = build_component(config, plugins.registries, "diagnostic", "mi")
    assert (mi.config, mi.options.scopes, mi.options.trajectory_samples) == (config, ["trajectory"], 4)
    grad = build_component(config, plugins.registries, "diagnostic", "grad")
    assert [step for step in range(1, 10) if grad.due(step)] == [3, 6, 9]


@pytest.mark.parametrize("options, message", [
    ({"mi": {"scope": ["first_turn"]}},
     r"^unknown option 'scope' for diagnostic 'mi' \(diagnostics\.options\.mi\.scope\); valid: scopes, "
     r"trajectory_samples, zscore_epsilon, zscore_ema_alpha, convention, token_marginal, columns, "
     r"trajectory_draws, empty_columns, retrieval_ties, check_at_step_zero$"),
    ({"mi": {"scopes": []}}, r"^invalid diagnostics\.options\.mi\.scopes: List should have at least 1 item"),
    ({"mi": {"zscore_epsilon": float("inf")}}, r"^invalid diagnostics\.options\.mi\.zscore_epsilon: "),
    ({"reward": {"every": 2}}, r"^unknown option 'every' for diagnostic 'reward' .*; valid: \(none\)$"),
    ({"nosuch": {}}, r"^unknown diagnostic 'nosuch'; valid: "),
])
def test_bad_diagnostic_options_are_refused_in_one_line(options, message, tiny_config):
    config = build_config(tiny_config() | {"diagnostics": {"options": options}})
    with pytest.raises(ConfigError, match=message):
        validate_config(config, build_plugins())


@pytest.mark.parametrize("diagnostics, message", [
    ({"names": ["reward", "collapse"]}, "the 'collapse' alarm reads the 'mi' diagnostic: add 'mi' "
                                        "to diagnostics.names"),
    ({"options": {"mi": {"scopes": ["trajectory"]}}},
     "diagnostics.alarm.scope 'first_turn' is not among the mi diagnostic's scopes ['trajectory'] "
     "(diagnostics.options.mi.scopes)"),
])
def test_the_collapse_alarm_refuses_a_config_without_its_mi_numbers(diagnostics, message, tiny_config):
    config = build_config(tiny_config() | {"diagnostics": diagnostics})
    with pytest.raises(ConfigError) as error:
        validate_config(config, build_plugins())
    assert str(error.value) == message


def test_the_alarm_scope_may_be_any_of_the_mi_scopes(tiny_config):
    validate_config(build_config(tiny_config() | {"diagnostics": {
        "alarm": {"scope": "trajectory"}, "options": {"mi": {"scopes": ["trajectory"]}}}}), build_plugins())


def test_top_p_mode_is_the_top_p_filters_own_option(tiny_config):
    plugins = build_plugins()
    config = build_config(tiny_config() | {"filter": {"name": "top_p", "options": {"mode": "softmax"}}})
    validate_config(config, plugins)
    assert build_component(config, plugins.registries, "filter", "top_p").options.mode == "softmax"
    other = build_config(tiny_config() | {"filter": {"name": "top_k", "options": {"mode": "softmax"}}})
    with pytest.raises(ConfigError, match=r"^unknown option 'mode' for filter 'top_k' "
                                          r"\(filter\.options\.mode\); valid: convention, rounding$"):
        validate_config(other, plugins)

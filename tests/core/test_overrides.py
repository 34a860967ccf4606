"""The one PATH=VALUE parser of `core run --set`, `core sweep --set/--grid` and `core runs --where`."""

from __future__ import annotations

import pytest

from mirage.core.config.nested import MISSING, lookup
from mirage.core.config.overrides import assign, merged, parse_settings, raw_pairs
from mirage.core.errors import ConfigError


def test_values_are_typed_by_the_config_field():
    assert parse_settings([
        "filter.name=top_p", "filter.rho=0.5", "steps=7", "threads=auto", "threads=2",
        "diagnostics.names=[\"mi\"]", "env.show_instruction=true", "model.path=null",
        "env.options.slip=0.2", "env.options.layout=open", "model.path=./ckpt",
    ]) == {"filter.name": "top_p", "filter.rho": 0.5, "steps": 7, "threads": 2,
           "diagnostics.names": ["mi"], "env.show_instruction": True, "model.path": "./ckpt",
           "env.options.slip": 0.2, "env.options.layout": "open"}


def test_a_text_field_keeps_text_that_looks_like_json():
    assert parse_settings(["filter.name=123"]) == {"filter.name": "123"}


@pytest.mark.parametrize("pair, message", [
    ("filter.rhoo=1", "--set filter.rhoo: unknown config path; valid under filter: filter.include_zero,"),
    ("nosuch=1", "--set nosuch: unknown config path; valid: algorithm.*, checkpoint_every,"),
    ("model.hidden.x=1", "--set model.hidden.x: unknown config path; valid under model: model.backend,"),
    ("env.options=", "--set env.options=: Input should be a valid dictionary"),
    ("steps=0", "--set steps=0: Input should be greater than or equal to 1"),
    ("filter.rho=lots", "--set filter.rho=lots: Input should be a valid number"),
    ("=1", "--set expects PATH=VALUE, got '=1'"),
])
def test_bad_settings_name_themselves(pair, message):
    with pytest.raises(ConfigError) as info:
        parse_settings([pair])
    assert str(info.value).startswith(message), str(info.value)


def test_assign_and_lookup_walk_dotted_paths():
    data: dict = {}
    assign(data, "env.options.slip", 0.1)
    assert data == {"env": {"options": {"slip": 0.1}}}
    assert lookup(data, "env.options.slip") == 0.1
    assert lookup(data, "env.name") is MISSING and lookup(data, "env.options.slip.x") is MISSING


def test_assign_merges_a_mapping_and_refuses_to_go_through_a_value():
    data = {"env": {"options": {"slip": 0.1, "size": 4}}, "steps": 3}
    assign(data, "env.options", {"slip": 0.5})
    assert data["env"]["options"] == {"slip": 0.5, "size": 4}
    with pytest.raises(ConfigError, match="'steps.x' goes through a non-mapping value"):
        assign(data, "steps.x", 1)


def test_merged_is_a_deep_copy_and_changes_neither_argument():
    base = {"env": {"options": {"slip": 0.1}}, "steps": 3}
    extra = {"env": {"options": {"size": 4}}}
    out = merged(base, extra)
    assert out == {"env": {"options": {"slip": 0.1, "size": 4}}, "steps": 3}
    out["env"]["options"]["slip"] = 0.9
    assign(out, "env.name", "sokoban")
    assert base == {"env": {"options": {"slip": 0.1}}, "steps": 3}
    assert extra == {"env": {"options": {"size": 4}}}


def test_raw_pairs_read_json_else_text():
    assert raw_pairs(["slip=0.1", "layout=open", "axis=[0, 0.5]"], "--grid") == {
        "slip": 0.1, "layout": "open", "axis": [0, 0.5]}
    with pytest.raises(ConfigError, match="--env-opt expects KEY=VALUE, got 'slip'"):
        raw_pairs(["slip"], "--env-opt", "KEY=VALUE")

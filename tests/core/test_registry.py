"""Named component registries (mirage/core/plugin_api/registry.py)."""

from __future__ import annotations

import pytest

from mirage.core.plugin_api.components import AdvantageEstimator, Algorithm, Diagnostic, Filter, Logger
from mirage.core.plugin_api.registry import KINDS, Registries, Registry, UnknownComponentError
from mirage.core.rl.backend import Backend
from mirage.core.rl.env import Environment


class Alpha: ...


class Beta: ...


class KeepAll(Filter):
    def select(self, batch): ...


CONTRACTS = {"envs": Environment, "backends": Backend, "algorithms": Algorithm,
             "estimators": AdvantageEstimator, "filters": Filter, "diagnostics": Diagnostic, "loggers": Logger}


def test_register_and_get_records_the_owner():
    reg = Registry("filters")
    reg.register("alpha", Alpha, owner="plugin-a")
    assert reg.get("alpha") is Alpha
    assert reg.owner("alpha") == "plugin-a"
    assert "alpha" in reg and "beta" not in reg


def test_duplicate_name_is_refused_naming_both_owners():
    reg = Registry("filters")
    reg.register("alpha", Alpha, owner="plugin-a")
    with pytest.raises(ValueError) as info:
        reg.register("alpha", Beta, owner="plugin-b")
    message = str(info.value)
    assert "'alpha'" in message and "plugin-a" in message and "plugin-b" in message
    assert reg.get("alpha") is Alpha  # the first registration survives
    assert reg.owner("alpha") == "plugin-a"


@pytest.mark.parametrize("bad", ["", None, 3])
def test_name_must_be_a_non_empty_string(bad):
    reg = Registry("envs")
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register(bad, Alpha)
    assert reg.names() == []


def test_unknown_name_lists_the_valid_names_sorted():
    reg = Registry("filters")
    for name in ["top_p", "none", "mid"]:
        reg.register(name, Alpha)
    with pytest.raises(UnknownComponentError) as info:
        reg.get("nosuch")
    error = info.value
    assert isinstance(error, KeyError)
    assert error.kind == "filters" and error.name == "nosuch"
    assert error.valid == ["mid", "none", "top_p"]
    assert str(error) == "unknown filter 'nosuch'; valid: mid, none, top_p"


def test_unknown_name_in_an_empty_registry():
    with pytest.raises(UnknownComponentError) as info:
        Registry("algorithms").get("grpo")
    assert str(info.value) == "unknown algorithm 'grpo'; valid: (none)"


def test_names_and_iteration_are_sorted():
    reg = Registry("envs")
    for name in ["sokoban", "frozenlake", "alpha"]:
        reg.register(name, Alpha)
    assert reg.names() == ["alpha", "frozenlake", "sokoban"]
    assert list(reg) == ["alpha", "frozenlake", "sokoban"]


def test_registries_of_each_kind_is_its_own_registry():
    regs = Registries()
    seen = [regs.of(kind) for kind in KINDS]
    assert [r.kind for r in seen] == list(KINDS)
    assert len({id(r) for r in seen}) == len(KINDS)
    regs.of("filters").register("x", KeepAll)
    assert "x" in regs.filters and all("x" not in regs.of(k) for k in KINDS if k != "filters")


def test_registries_of_unknown_kind_lists_kinds():
    with pytest.raises(UnknownComponentError) as info:
        Registries().of("widgets")
    message = str(info.value)
    assert "'widgets'" in message
    for kind in KINDS:
        assert kind in message


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_refuses_a_class_that_does_not_subclass_its_base(kind):
    base = CONTRACTS[kind]
    registry = Registries().of(kind)
    with pytest.raises(ValueError) as info:
        registry.register("duck", Alpha, owner="plugin-a")
    assert str(info.value) == (f"{kind}: 'duck' (by plugin-a) must subclass "
                               f"{base.__module__}.{base.__qualname__}; got {Alpha!r}")
    assert "duck" not in registry
    registry.register("subclass", type("Sub", (base,), {}), owner="plugin-a")
    assert "subclass" in registry

"""Run configs stored by earlier code (mirage/core/config/legacy.py): the store's
migration brings them to today's layout once and keeps the hash each was known by.

``data/legacy_configs.json`` holds configs and hashes written by the code before
components owned their options (commit 95a7669); ``results/reproduction`` is a store
exported before hashes were stored (schema 5)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from mirage.core.config.legacy import (
    MOVED, WARMSTART_SEED, WARMSTART_SEED_DEFAULT, current_layout, fill_warmstart_seed,
    original_hash,
)
from mirage.core.config.nested import MISSING, lookup
from mirage.core.config.run_config import RunConfig, config_hash
from mirage.core.errors import ConfigError
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.validate import build_config, parse_config, validate_config
from mirage.core.store.run_store import RunStore
from mirage.flows.cells import plan_cells

ROOT = Path(__file__).resolve().parents[2]
LEGACY = json.loads((Path(__file__).parent / "data" / "legacy_configs.json").read_text())
STORED = {entry["label"]: entry for entry in LEGACY["stored"]}


@pytest.mark.parametrize("label", sorted(STORED))
def test_an_old_stored_config_keeps_its_original_hash_and_loads_in_todays_layout(label):
    entry = STORED[label]
    assert original_hash(entry["config"]) == entry["run_hash"]
    loaded = build_config(current_layout(entry["config"]))
    # today's layout hashes as it was stored, and the original hash is the same from either
    assert loaded.run_hash() == config_hash(current_layout(entry["config"]))
    assert original_hash(loaded.model_dump(mode="json")) == entry["run_hash"]


def test_old_settings_move_to_the_components_options():
    powered = build_config(current_layout(STORED["reproduction_powered slip 0.2 top_p"]["config"]))
    # settings at their old default are dropped: the option's default is the same
    assert powered.model.options == {"warmstart_seed": 0, "warmstart_env_options": {"slip": 0.0}}
    assert powered.filter.options == {}
    quartile = build_config(current_layout(STORED["quartile 3, tiny"]["config"]))
    assert quartile.filter.options == {"quartile": 3}
    # the flat layout's warm-start seed default (None: the run seed) is kept, not dropped
    assert quartile.model.options == {"hidden": 32, "layers": 1, "heads": 2, "warmstart_episodes": 40,
                                      "warmstart_steps": 15, "warmstart_batch": 16,
                                      "warmstart_seed": None}
    vllm = build_config(current_layout(STORED["vllm backend, gpu memory 0.8, generate decoder"]["config"]))
    assert vllm.model.options == {"gpu_memory": 0.8, "decoder": "generate", "warmstart_lr": 0.001,
                                  "warmstart_seed": None}
    plugins = build_plugins()
    for config in (powered, quartile):
        validate_config(config, plugins)


def test_a_setting_given_at_both_paths_is_refused():
    with pytest.raises(ValueError, match=r"model\.hidden \(an earlier layout\) and model\.options\.hidden"):
        current_layout({"model": {"hidden": 64, "options": {"hidden": 32}}})


def test_a_setting_of_an_earlier_layout_is_refused_naming_where_it_lives_now():
    from mirage.core.config.overrides import parse_settings

    with pytest.raises(ConfigError, match=r"--set model\.warmstart_steps: this setting moved to "
                                          r"model\.options\.warmstart_steps"):
        parse_settings(["model.warmstart_steps=3"])
    with pytest.raises(ConfigError, match=r"invalid filter\.quartile: .*moved to filter\.options\.quartile"):
        parse_config({"filter": {"name": "quartile", "quartile": 2}})


def test_every_moved_setting_has_a_new_home_with_its_old_default():
    """In a built-in component's options, or (the loop's settings) in the run config."""
    plugins = build_plugins().registries
    owners = {"filter": [plugins.filters.get("quartile"), plugins.filters.get("top_p")],
              "model": [plugins.backends.get("local"), plugins.backends.get("vllm")]}
    for old, (new, default) in MOVED.items():
        if new.startswith("diagnostics.options."):  # by name: diagnostics.options.NAME.OPTION
            _, _, name, option = new.split(".")
            fields = plugins.diagnostics.get(name).Options.model_fields
        elif "." in new:  # section.options.OPTION
            section, _, option = new.split(".")
            fields = {name: field for cls in owners[section] for name, field in cls.Options.model_fields.items()}
        else:
            option, fields = new, RunConfig.model_fields
        assert option in fields, new
        expected = WARMSTART_SEED_DEFAULT if old == WARMSTART_SEED else default  # changed since (#31)
        assert fields[option].get_default(call_default_factory=True) == expected, old
    for old, (new, _) in MOVED.items():  # moved by the migration, refused by today's config
        assert lookup(current_layout(_nested(old, "x")), new) == "x" and lookup(
            current_layout(_nested(old, "x")), old) is MISSING
        with pytest.raises(ConfigError, match=f"moved to {new}"):
            parse_config(_nested(old, "x"))


def _nested(path: str, value) -> dict:
    data: dict = {}
    *parents, leaf = path.split(".")
    target = data
    for part in parents:
        target = target.setdefault(part, {})
    target[leaf] = value
    return data


def test_the_reproduction_powered_cells_keep_their_original_hashes():
    cells = [spec.config for spec in plan_cells("reproduction_powered")]
    assert [original_hash(c) for c in cells] == [c[2] for c in LEGACY["reproduction_powered_cells"]]


def _dump(seed: int, **options) -> dict:
    return build_config({"seed": seed, "model": {"options": options}}).model_dump(mode="json")


def test_an_unset_warmstart_seed_had_the_hash_of_the_seed_it_means():
    """Unset, the warm-start seed is 0 (issue #31); before, it was the run seed (None). At
    run seed 0 both name one warm start and had one original hash; at any other seed an
    unset one was hashed as an explicit 0."""
    assert original_hash(_dump(0)) == original_hash(_dump(0, warmstart_seed=None))
    assert original_hash(_dump(3)) == original_hash(_dump(3, warmstart_seed=0))
    assert original_hash(_dump(3)) != original_hash(_dump(3, warmstart_seed=None))


def test_migration_5_names_the_warmstart_seed_a_run_ran_with():
    stored = _dump(3)
    stored["model"]["options"].pop("warmstart_seed", None)  # as code before #31 stored it
    assert fill_warmstart_seed(stored) and stored["model"]["options"]["warmstart_seed"] is None
    assert not fill_warmstart_seed(stored)  # once is enough
    elsewhere = _dump(3) | {"model": {**_dump(3)["model"], "path": "/some/checkpoint", "options": {}}}
    assert not fill_warmstart_seed(elsewhere)  # a given checkpoint has no warm start


def test_flat_layout_data_keeps_the_old_warmstart_seed_default():
    flat = _dump(2, warmstart_seed=None)  # stored before #21: the local options flat, and
    flat["model"].pop("options")          # no warm-start seed yet (the reproduction study's)
    flat["model"] |= {"hidden": 128, "decoder": "lean"}
    assert build_config(current_layout(flat)).model.options == {"warmstart_seed": None}
    assert original_hash(flat) == original_hash(_dump(2, warmstart_seed=None)) != original_hash(_dump(2))


# #34's moves: the top-p filter's and the diagnostics' own settings into their options,
# and the loop's out of the filter section.
BEFORE_34 = {"filter": {"name": "top_p", "mode": "softmax", "loss_scaling": "sqrt",
                        "step_size_matching": True, "max_empty_steps": 9},
             "diagnostics": {"names": ["mi", "grad"], "scopes": ["first_turn"], "trajectory_samples": 8,
                             "zscore_epsilon": 0.01, "zscore_ema_alpha": 0.5, "gradient_every": 2}}
AFTER_34 = {"filter": {"name": "top_p", "options": {"mode": "softmax"}},
            "loss_scaling": "sqrt", "step_size_matching": True, "max_empty_steps": 9,
            "diagnostics": {"names": ["mi", "grad"], "options": {
                "mi": {"scopes": ["first_turn"], "trajectory_samples": 8, "zscore_epsilon": 0.01,
                       "zscore_ema_alpha": 0.5},
                "grad": {"every": 2}}}}


def test_34s_settings_move_to_the_components_options_and_the_loop():
    assert current_layout(BEFORE_34) == AFTER_34 and current_layout(AFTER_34) == AFTER_34
    assert original_hash(BEFORE_34) == original_hash(AFTER_34)
    validate_config(build_config(current_layout(BEFORE_34)), build_plugins())
    # at their old defaults they are dropped (stored configs list every field)
    defaults = {"filter": {"mode": "linear", "loss_scaling": "none", "step_size_matching": False,
                           "max_empty_steps": 5},
                "diagnostics": {"scopes": ["first_turn", "trajectory"], "trajectory_samples": 32,
                                "zscore_epsilon": 1e-3, "zscore_ema_alpha": 0.9, "gradient_every": 20}}
    assert current_layout(defaults) == {"filter": {}, "diagnostics": {}}
    assert original_hash(defaults) == original_hash({})


def test_a_run_stored_in_the_layout_before_34_is_not_the_flat_layout():
    """Runs stored since #21 list filter.mode, filter.loss_scaling, ...: the warm-start
    seed's rules of the flat layout (#21) do not apply to them, and migration 5 still
    names the seed they ran with."""
    stored = _dump(3)
    stored["filter"] |= {"mode": "linear"} | {k: stored.pop(k) for k in
                                               ("loss_scaling", "step_size_matching", "max_empty_steps")}
    stored["diagnostics"] |= {"scopes": ["first_turn", "trajectory"], "gradient_every": 20}
    stored["diagnostics"].pop("options")
    assert original_hash(stored) == original_hash(_dump(3)) != original_hash(_dump(3, warmstart_seed=None))
    assert "warmstart_seed" not in build_config(current_layout(stored)).model.options
    assert fill_warmstart_seed(stored)  # migration 5 still recognises such a run


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory) -> RunStore:
    path = tmp_path_factory.mktemp("reproduction") / "store.duckdb"
    con = duckdb.connect(str(path))
    con.execute(f"IMPORT DATABASE '{ROOT / 'results' / 'reproduction'}'")
    con.close()
    return RunStore(path)  # opening it applies migration 6


def test_every_registry_cell_finds_the_runs_it_found_before_the_hashes_were_stored(reproduction):
    """A registry cell matches a stored run by today's hashes exactly when it matched it by
    the hashes of before (the frozen original_hash of both); over every cell of every
    experiment and every run of the committed reproduction store."""
    from mirage.core.run.experiments import load_registry

    runs = reproduction.list_runs()
    assert runs and all(run["config_hash"] == config_hash(run["config"]) for run in runs)
    # a run stored since (today's hash only, no original_hash) had the frozen hash of its config
    known_by = {run["run_id"]: run["original_hash"] or original_hash(run["config"]) for run in runs}
    assert any(run["original_hash"] for run in runs) and not all(run["original_hash"] for run in runs)
    matched = 0
    for experiment in sorted(load_registry(None)):
        for spec in plan_cells(experiment):
            before = original_hash(spec.config)
            for run in runs:
                same = run["config_hash"] == spec.config_hash
                assert same == (known_by[run["run_id"]] == before), (experiment, spec.cell, run["run_id"])
                matched += same
    assert matched >= 67  # the cells of the reproduction studies find their runs

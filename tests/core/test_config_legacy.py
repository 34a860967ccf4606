"""Run configs stored before components owned their options (the flat layout: 
``filter.quartile``, ``model.hidden``, ``model.warmstart_*``, ``model.vllm_gpu_memory``)
still load, and keep their hashes: sweeps reuse finished cells, and name cell folders, by
them. ``data/legacy_configs.json`` holds configs and hashes written by the code before the
move (commit 95a7669)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirage.core.config import RunConfig, config_hash
from mirage.core.config_legacy import (
    MOVED, WARMSTART_SEED, WARMSTART_SEED_DEFAULT, hash_view, migrate,
)
from mirage.core.plugins import build_plugins
from mirage.core.validate import ConfigError, build_config, validate_config
from mirage.flows.cells import plan_cells

LEGACY = json.loads((Path(__file__).parent / "data" / "legacy_configs.json").read_text())
STORED = {entry["label"]: entry for entry in LEGACY["stored"]}


@pytest.mark.parametrize("label", sorted(STORED))
def test_an_old_stored_config_keeps_its_hash_and_loads_to_the_same_hash(label):
    entry = STORED[label]
    assert config_hash(entry["config"]) == entry["run_hash"]
    loaded = build_config(entry["config"])
    assert loaded.run_hash() == entry["run_hash"]
    assert config_hash(loaded.model_dump(mode="json")) == entry["run_hash"]


def test_old_settings_move_to_the_components_options():
    powered = build_config(STORED["reproduction_powered slip 0.2 top_p"]["config"])
    # settings at their old default are dropped: the option's default is the same
    assert powered.model.options == {"warmstart_seed": 0, "warmstart_env_options": {"slip": 0.0}}
    assert powered.filter.options == {}
    quartile = build_config(STORED["quartile 3, tiny"]["config"])
    assert quartile.filter.options == {"quartile": 3}
    # the old layout's warm-start seed default (None: the run seed) is kept, not dropped
    assert quartile.model.options == {"hidden": 32, "layers": 1, "heads": 2, "warmstart_episodes": 40,
                                      "warmstart_steps": 15, "warmstart_batch": 16,
                                      "warmstart_seed": None}
    vllm = build_config(STORED["vllm backend, gpu memory 0.8, generate decoder"]["config"])
    assert vllm.model.options == {"gpu_memory": 0.8, "decoder": "generate", "warmstart_lr": 0.001,
                                  "warmstart_seed": None}


def test_migrated_old_configs_pass_validation_against_the_components():
    plugins = build_plugins()
    for label in ("reproduction_powered slip 0.2 top_p", "quartile 3, tiny"):
        validate_config(build_config(STORED[label]["config"]), plugins)


def test_the_same_config_in_either_layout_hashes_alike():
    old = {"filter": {"name": "quartile", "quartile": 2}, "model": {"warmstart_seed": 0, "hidden": 64}}
    new = {"filter": {"name": "quartile", "options": {"quartile": 2}},
           "model": {"options": {"warmstart_seed": 0, "hidden": 64}}}
    assert migrate(old) == new and migrate(new) == new
    assert config_hash(old) == config_hash(new)
    assert build_config(old).run_hash() == build_config(new).run_hash()
    assert hash_view(new) == {"filter": {"name": "quartile", "options": {}, "quartile": 2},
                              "model": {"options": {}, "warmstart_seed": 0, "hidden": 64}}
    # a setting at its default counts as absent in either layout
    assert config_hash({"model": {"options": {"hidden": 128}}}) == config_hash({"model": {"hidden": 128}}) \
        == config_hash({})


def test_a_setting_given_at_both_paths_is_refused():
    with pytest.raises(ConfigError, match=r"model\.hidden \(the old layout\) and model\.options\.hidden both given"):
        build_config({"model": {"hidden": 64, "options": {"hidden": 32}}})


def test_old_set_paths_still_work():
    from mirage.core.overrides import parse_settings

    assert parse_settings(["model.warmstart_steps=3", "filter.quartile=2"]) == {
        "model.options.warmstart_steps": 3, "filter.options.quartile": 2}


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


def test_the_sweep_in_progress_keeps_every_cell_hash():
    """reproduction_powered ran under the old layout; registry.yaml now uses the new one,
    and every cell must keep its hash so the sweep resumes where it stopped."""
    cells = [[spec.cell, spec.seed, spec.config_hash] for spec in plan_cells("reproduction_powered")]
    assert [c[2] for c in cells] == [c[2] for c in LEGACY["reproduction_powered_cells"]]


def _dump(seed: int, **options) -> dict:
    return build_config({"seed": seed, "model": {"options": options}}).model_dump(mode="json")


def test_an_unset_warmstart_seed_hashes_as_the_seed_it_now_means():
    """Unset, the warm-start seed is 0 (issue #31); before, it was the run seed (None). At
    run seed 0 both name one warm start and hash alike; at any other seed an unset one
    hashes as an explicit 0, never as a stored run's per-seed warm start."""
    assert config_hash(_dump(0)) == config_hash(_dump(0, warmstart_seed=None))
    assert config_hash(_dump(3)) == config_hash(_dump(3, warmstart_seed=0))
    assert config_hash(_dump(3)) != config_hash(_dump(3, warmstart_seed=None))


def test_a_stored_run_of_the_old_default_keeps_its_meaning_and_hash():
    """What the store's migration 5 does to a run stored before the default changed: its
    unset seed becomes the None it ran with, and the hash it had (the basis then) stays."""
    from mirage.core.config_legacy import fill_warmstart_seed

    stored = _dump(3)  # as code before #31 stored it: no warmstart_seed in the options
    assert fill_warmstart_seed(stored) and stored["model"]["options"]["warmstart_seed"] is None
    assert config_hash(stored) == config_hash(_dump(3, warmstart_seed=None))
    assert not fill_warmstart_seed(stored)  # once is enough
    assert build_config(stored).model.options["warmstart_seed"] is None
    elsewhere = _dump(3) | {"model": {**_dump(3)["model"], "path": "/some/checkpoint"}}
    assert not fill_warmstart_seed(elsewhere)  # a given checkpoint has no warm start


def test_old_layout_data_keeps_the_old_warmstart_seed_default():
    """Config data in the flat layout was written before the default changed: a stored
    config of the reproduction study, written before the setting existed, still runs
    each seed's own warm start."""
    flat = _dump(2, warmstart_seed=None)  # stored before #21: the local options flat, and
    flat["model"].pop("options")          # no warm-start seed yet (the reproduction study's)
    flat["model"] |= {"hidden": 128, "decoder": "lean"}
    assert build_config(flat).model.options == {"warmstart_seed": None}
    # the hash it always had: only the seed differs from the defaults it was hashed against
    assert config_hash(flat) == config_hash(_dump(2, warmstart_seed=None)) != config_hash(_dump(2))


# --------------------------------------------------------------------------- #34's moves

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


def test_34s_settings_move_to_the_component_options_and_the_loop_and_hash_alike():
    assert migrate(BEFORE_34) == AFTER_34 and migrate(AFTER_34) == AFTER_34
    assert hash_view(AFTER_34) == BEFORE_34 | {  # a per-name options mapping left empty goes
        "filter": BEFORE_34["filter"] | {"options": {}},
        "diagnostics": BEFORE_34["diagnostics"] | {"options": {}},
        "model": {"options": {}, "warmstart_seed": None}}  # seed 0's unset one, as above
    assert config_hash(BEFORE_34) == config_hash(AFTER_34)
    built = build_config(BEFORE_34)
    assert built.run_hash() == build_config(AFTER_34).run_hash()
    validate_config(built, build_plugins())
    # at their old defaults they are dropped (stored configs list every field)
    defaults = {"filter": {"mode": "linear", "loss_scaling": "none", "step_size_matching": False,
                           "max_empty_steps": 5},
                "diagnostics": {"scopes": ["first_turn", "trajectory"], "trajectory_samples": 32,
                                "zscore_epsilon": 1e-3, "zscore_ema_alpha": 0.9, "gradient_every": 20}}
    assert migrate(defaults) == {"filter": {}, "diagnostics": {}}
    assert config_hash(defaults) == config_hash({})


def test_34s_old_set_paths_still_work():
    from mirage.core.overrides import parse_settings

    assert parse_settings(["filter.mode=softmax", "filter.max_empty_steps=3",
                           "diagnostics.scopes=[\"trajectory\"]", "diagnostics.gradient_every=1"]) == {
        "filter.options.mode": "softmax", "max_empty_steps": 3,
        "diagnostics.options.mi.scopes": ["trajectory"], "diagnostics.options.grad.every": 1}


def test_a_run_stored_in_the_layout_before_34_is_not_the_flat_layout():
    """Runs stored since #21 list filter.mode, filter.loss_scaling, ...: the warm-start
    seed's rules of the flat layout (#21) do not apply to them. An unset seed means what
    it meant when they ran (the store's migration 5 fills runs stored before #31), and the
    hash is the one they had."""
    stored = _dump(3)
    stored["filter"] |= {"mode": "linear"} | {k: stored.pop(k) for k in
                                               ("loss_scaling", "step_size_matching", "max_empty_steps")}
    stored["diagnostics"] |= {"scopes": ["first_turn", "trajectory"], "gradient_every": 20}
    assert config_hash(stored) == config_hash(_dump(3)) != config_hash(_dump(3, warmstart_seed=None))
    assert "warmstart_seed" not in build_config(stored).model.options
    from mirage.core.config_legacy import fill_warmstart_seed

    assert fill_warmstart_seed(stored)  # migration 5 still recognises such a run

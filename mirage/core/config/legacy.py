"""Run configs stored by earlier code, brought to today's layout once: the row rewrites of
the store's migrations 5 and 6 (mirage/core/store/migrations.py), which
``RunStore.import_runs`` also applies to runs it copies from an older file.

This module is frozen history: nothing reads a stored config through it after the
migration (validation only names a moved setting's new path from :data:`MOVED`). Earlier
layouts held settings at the old paths of :data:`MOVED`: components' settings in the run
config's sections (the flat layout, before components owned their options, issue #21),
and top-p's, the diagnostics' and the loop's settings in the filter and diagnostics
sections (before issue #34).

Until schema 6 a run's hash was recomputed from its stored config on every read, in the
flat layout and against defaults frozen when hashes were defined (``hash_basis.json``). The
migration records that hash as the run's ``original_hash`` and stores today's
(``mirage.core.config.run_config.config_hash`` of the rewritten config) as its ``config_hash``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from mirage.core.config.nested import MISSING, lookup
from mirage.core.config.run_config import RunConfig, hash_against


# old path -> (new path, default before the move). Stored configs list every field, so an
# old setting at its default is dropped rather than moved: the option's default is the same,
# and a component that does not declare the option would refuse it.
FLAT: dict[str, tuple[str, Any]] = {  # issue #21: components' settings into their options
    "filter.quartile": ("filter.options.quartile", 1),
    "model.hidden": ("model.options.hidden", 128),
    "model.layers": ("model.options.layers", 4),
    "model.heads": ("model.options.heads", 4),
    "model.warmstart_episodes": ("model.options.warmstart_episodes", 3000),
    "model.warmstart_steps": ("model.options.warmstart_steps", 1200),
    "model.warmstart_batch": ("model.options.warmstart_batch", 64),
    "model.warmstart_lr": ("model.options.warmstart_lr", 2e-3),
    "model.warmstart_seed": ("model.options.warmstart_seed", None),
    "model.warmstart_env_options": ("model.options.warmstart_env_options", {}),
    "model.decoder": ("model.options.decoder", "lean"),
    "model.vllm_gpu_memory": ("model.options.gpu_memory", 0.5),
}
OWNED: dict[str, tuple[str, Any]] = {  # issue #34: top-p's and the diagnostics' own settings
    "filter.mode": ("filter.options.mode", "linear"),  # into their options, the loop's out
    "filter.loss_scaling": ("loss_scaling", "none"),  # of the filter section
    "filter.step_size_matching": ("step_size_matching", False),
    "filter.max_empty_steps": ("max_empty_steps", 5),
    "diagnostics.scopes": ("diagnostics.options.mi.scopes", ["first_turn", "trajectory"]),
    "diagnostics.trajectory_samples": ("diagnostics.options.mi.trajectory_samples", 32),
    "diagnostics.zscore_epsilon": ("diagnostics.options.mi.zscore_epsilon", 1e-3),
    "diagnostics.zscore_ema_alpha": ("diagnostics.options.mi.zscore_ema_alpha", 0.9),
    "diagnostics.gradient_every": ("diagnostics.options.grad.every", 20),
}
MOVED = FLAT | OWNED  # hashes were computed with every setting at its old path

# The defaults, in the flat layout, that hashes were computed against until schema 6
# (written out by that code): the algorithm section as GRPO resolved it, every moved
# setting at its old default, 40 steps and 256 validation episodes.
HASH_BASIS: dict[str, Any] = json.loads((Path(__file__).parent / "hash_basis.json").read_text())

WARMSTART_SEED = "model.warmstart_seed"  # its path in the flat layout
WARMSTART_SEED_DEFAULT = 0  # the local backend's default since issue #31 (None before)


def flat_layout(data: dict[str, Any]) -> bool:
    """Whether config data holds a setting at a path of the flat layout."""
    return any(lookup(data, old) is not MISSING for old in FLAT)


def uses_warmstart_seed(data: dict[str, Any]) -> bool:
    """Whether config data (not in the flat layout) names a backend with a warm start."""
    model = data.get("model") or {}
    return model.get("backend", "local") in ("local", "vllm") and model.get("path") is None


def fill_warmstart_seed(data: dict[str, Any]) -> bool:
    """Migration 5: give a stored config that leaves the warm-start seed unset the value it
    ran with (None: the run seed); True when ``data`` was changed."""
    options = (data.get("model") or {}).get("options")
    if flat_layout(data) or not isinstance(options, dict) or "warmstart_seed" in options \
            or not uses_warmstart_seed(data):
        return False
    options["warmstart_seed"] = None
    return True


def current_layout(data: dict[str, Any]) -> dict[str, Any]:
    """Migration 6: stored config data of any earlier layout in today's (a copy). Raises
    ValueError when one setting is given at both its old and its new path."""
    data = copy.deepcopy(data)
    if flat_layout(data) and lookup(data, WARMSTART_SEED) is MISSING:
        _put(data, WARMSTART_SEED, None)  # the flat layout's default: the run seed
    for old, (new, default) in MOVED.items():
        value = _pop(data, old)
        if value is MISSING or (value == default and old != WARMSTART_SEED):
            continue
        if lookup(data, new) is not MISSING:
            raise ValueError(f"{old} (an earlier layout) and {new} both given; keep {new}")
        _put(data, new, value)
    return data


def original_hash(data: dict[str, Any]) -> str:
    """The hash stored config data had until schema 6: its settings that differ from
    :data:`HASH_BASIS`, in the flat layout, with its ``results_version`` (absent: 1),
    the ``loggers`` section left out."""
    return hash_against(_hashed_layout(data), HASH_BASIS)


def _hashed_layout(data: dict[str, Any]) -> dict[str, Any]:
    if not flat_layout(data) and uses_warmstart_seed(data) \
            and lookup(data, "model.options.warmstart_seed") is MISSING:
        # Unset meant seed 0 from issue #31 on: at run seed 0 the old default's warm start
        # (hashed as None), at any other seed seed 0's, hashed as an explicit 0.
        data = copy.deepcopy(data)
        seed = WARMSTART_SEED_DEFAULT if data.get("seed", 0) != WARMSTART_SEED_DEFAULT else None
        _put(data, "model.options.warmstart_seed", seed)
    data = current_layout(data)
    for old, (new, _) in MOVED.items():
        value = _pop(data, new)
        if value is not MISSING:
            _put(data, old, value)
        _drop_if_new_and_empty(data, new.rpartition(".")[0])
    _drop_later_defaults(data, HASH_BASIS, RunConfig().model_dump(mode="json"))
    return data


def _drop_later_defaults(data: dict[str, Any], basis: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Remove the settings added after the hashes were defined (absent from the basis)
    while at today's default (``model.parallel: none``, say): a stored config read into
    today's layout carries them, and they were no setting when its hash was made."""
    for key in list(data):
        if key not in basis:
            if key in defaults and data[key] == defaults[key]:
                del data[key]
        elif isinstance(data[key], dict) and isinstance(basis[key], dict) and isinstance(defaults.get(key), dict):
            _drop_later_defaults(data[key], basis[key], defaults[key])


def _drop_if_new_and_empty(data: dict[str, Any], path: str) -> None:
    """Remove the mapping at ``path`` and its parents while each is empty (or absent) and
    unknown to the basis (``diagnostics.options.mi`` and ``diagnostics.options`` once the
    settings are back at their old paths)."""
    while path and lookup(HASH_BASIS, path) is MISSING and lookup(data, path) in ({}, MISSING):
        _pop(data, path)
        path = path.rpartition(".")[0]


def _pop(data: dict[str, Any], path: str) -> Any:
    *parents, leaf = path.split(".")
    parent = lookup(data, ".".join(parents)) if parents else data
    if not isinstance(parent, dict) or leaf not in parent:
        return MISSING
    return parent.pop(leaf)


def _put(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[leaf] = value

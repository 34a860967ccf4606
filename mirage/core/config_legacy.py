"""The one migration of run config data from the layouts of runs stored before
components owned their options (issues #21 and #34).

Until #21 the run config held some components' own settings in its sections:
``filter.quartile`` (the quartile filter's), ``model.hidden``/``layers``/``heads``/
``warmstart_*``/``decoder`` (the local backend's) and ``model.vllm_gpu_memory`` (the vLLM
backend's); until #34, ``filter.mode`` (the top-p filter's), ``diagnostics.scopes``/
``trajectory_samples``/``zscore_*`` (the ``mi`` diagnostic's), ``diagnostics.gradient_every``
(the ``grad`` diagnostic's) and, in the filter section, the loop's ``loss_scaling``,
``step_size_matching`` and ``max_empty_steps``. They now live in the chosen component's
options (``filter.options``, ``model.options``, ``diagnostics.options[name]``) and, for
the loop's, at the top level. :func:`migrate` rewrites old data to the new layout before
validation; it is applied by ``RunConfig`` itself, so stored configs, registry files and
config files of any layout load.

Run hashes (:func:`mirage.core.config.config_hash`) name sweep cells and their folders, so
they must not change with the layout: :func:`hash_view` turns data of any layout into
the flat layout the hashes were computed on (every moved setting at its old path), and
every layout of one config hashes alike.

Hashes count only the settings that differ from the defaults. Until algorithm presets moved
onto the algorithm classes, the defaults themselves were resolved under the default
algorithm, GRPO; :data:`HASHED_ALGORITHM_DEFAULTS` keeps those values as the basis, so a
resolved config hashes as it always did. :data:`HASHED_RUN_DEFAULTS` does the same for run
defaults changed later (steps, validation): a stored run keeps its hash, and a config at
today's defaults hashes by what it differs from the old ones.

The warm-start seed's default changed later (issue #31): ``model.options.warmstart_seed``
left unset meant the run seed (None) and now means 0, one warm start for every run seed.
Data that says nothing of it is read by when it was written: config data in the flat
layout of #21 (:data:`FLAT_MOVED`; #34's old paths do not count, runs stored since #21
list them) keeps the old default (it is moved as an explicit None), stored runs of the new
layout got an explicit None from the store's migration 5 (``fill_warmstart_seed``), and
:func:`hash_view` hashes an unset one as the seed it now means, so a run of the new
default never shares a hash with a stored per-seed warm start.
"""

from __future__ import annotations

import copy
from typing import Any

from mirage.core.nested import MISSING, lookup


# old path -> (new path, default before the move). Stored configs list every field, so an
# old setting at its default is dropped rather than moved: the option's default is the same,
# and a component that does not declare the option (any filter but quartile) would refuse it.
# The flat layout (#21): components' settings in their sections.
FLAT_MOVED: dict[str, tuple[str, Any]] = {
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
# #34: the top-p filter's and the diagnostics' own settings into their options, and the
# loop's settings after filtering out of the filter section.
MOVED: dict[str, tuple[str, Any]] = FLAT_MOVED | {
    "filter.mode": ("filter.options.mode", "linear"),
    "filter.loss_scaling": ("loss_scaling", "none"),
    "filter.step_size_matching": ("step_size_matching", False),
    "filter.max_empty_steps": ("max_empty_steps", 5),
    "diagnostics.scopes": ("diagnostics.options.mi.scopes", ["first_turn", "trajectory"]),
    "diagnostics.trajectory_samples": ("diagnostics.options.mi.trajectory_samples", 32),
    "diagnostics.zscore_epsilon": ("diagnostics.options.mi.zscore_epsilon", 1e-3),
    "diagnostics.zscore_ema_alpha": ("diagnostics.options.mi.zscore_ema_alpha", 0.9),
    "diagnostics.gradient_every": ("diagnostics.options.grad.every", 20),
}


# The algorithm section's defaults as resolved under GRPO when hashes were defined (settings
# not listed were None); only the basis of the hash, not what any run uses.
HASHED_ALGORITHM_DEFAULTS: dict[str, Any] = {
    "adv_estimator": "grpo",
    "norm_adv_by_std": True,
    "loss_agg_mode": "seq-mean-token-mean",
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2,
    "dynamic_sampling": False,
}


# The warm-start seed: its path in the old layout, and the backends whose options hold it.
WARMSTART_SEED = "model.warmstart_seed"
WARMSTART_BACKENDS = ("local", "vllm")
WARMSTART_SEED_DEFAULT = 0  # the local backend's default since issue #31 (None before)


# Run defaults changed since hashes were defined (issue #31 made the main job fit minutes),
# at the values runs were hashed against; only the basis of the hash, like the above.
HASHED_RUN_DEFAULTS: dict[str, Any] = {
    "steps": 40,
    "validation.episodes": 256,
}


def new_path(path: str) -> str:
    """Where the setting at dotted ``path`` lives now (``path`` itself unless it moved)."""
    return MOVED[path][0] if path in MOVED else path


def migrate(data: Any) -> Any:
    """Config data in the current layout (a copy; data already in it comes back equal).
    Raises ValueError when one setting is given at both its old and its new path."""
    if not isinstance(data, dict):
        return data
    data = copy.deepcopy(data)
    if old_layout(data) and lookup(data, WARMSTART_SEED) is MISSING:
        _put(data, WARMSTART_SEED, None)  # the old layout's default: the run seed
    for old, (new, default) in MOVED.items():
        value = _pop(data, old)
        if value is MISSING or (value == default and old != WARMSTART_SEED):
            continue
        if lookup(data, new) is not MISSING:
            raise ValueError(f"{old} (the old layout) and {new} both given; keep {new}")
        _put(data, new, value)
    return data


def old_layout(data: dict[str, Any]) -> bool:
    """Whether config data is in the flat layout of #21: it holds a setting at one of its
    old paths. (Data that holds only #34's old paths was written in #21's layout, perhaps
    after the warm-start seed's default changed: today's stored runs list ``filter.mode``.)"""
    return any(lookup(data, old) is not MISSING for old in FLAT_MOVED)


def uses_warmstart_seed(data: dict[str, Any]) -> bool:
    """Whether config data (of the current layout) names a backend with a warm start."""
    model = data.get("model") or {}
    return model.get("backend", "local") in WARMSTART_BACKENDS and model.get("path") is None


def fill_warmstart_seed(data: dict[str, Any]) -> bool:
    """Give a stored config of the current layout that leaves the warm-start seed unset
    the value it ran with (None: the run seed); True when ``data`` was changed. What the
    store's migration 5 applies to runs stored before the default changed."""
    options = (data.get("model") or {}).get("options")
    if old_layout(data) or not isinstance(options, dict) or "warmstart_seed" in options \
            or not uses_warmstart_seed(data):
        return False
    options["warmstart_seed"] = None
    return True


def hash_view(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` of either layout in the flat layout run hashes are computed on."""
    if not old_layout(data) and uses_warmstart_seed(data) \
            and lookup(data, "model.options.warmstart_seed") is MISSING:
        # Unset now means seed 0. At run seed 0 that is the old default's warm start (the
        # hash is the old one); at any other seed, seed 0's, hashed as an explicit 0.
        data = copy.deepcopy(data)
        seed = WARMSTART_SEED_DEFAULT if data.get("seed", 0) != WARMSTART_SEED_DEFAULT else None
        _put(data, "model.options.warmstart_seed", seed)
    data = migrate(data)
    for old, (new, _) in MOVED.items():
        value = _pop(data, new)
        if value is not MISSING:
            _put(data, old, value)
    return data


def hash_defaults(defaults: dict[str, Any]) -> dict[str, Any]:
    """The current defaults (``RunConfig().model_dump``) in the flat layout, with every
    moved setting at its old default and the algorithm section as GRPO resolved it."""
    view = hash_view(defaults)
    for old, (_, default) in MOVED.items():
        _put(view, old, copy.deepcopy(default))
    view["algorithm"] |= HASHED_ALGORITHM_DEFAULTS
    for path, value in HASHED_RUN_DEFAULTS.items():
        _put(view, path, value)
    return view


def _pop(data: dict[str, Any], path: str) -> Any:
    *parents, leaf = path.split(".")
    parent = lookup(data, ".".join(parents)) if parents else data
    if not isinstance(parent, dict) or leaf not in parent:
        return MISSING
    value = parent.pop(leaf)
    if len(parents) > 2 and not parent:  # a component's options by name (diagnostics.options.mi)
        lookup(data, ".".join(parents[:-1])).pop(parents[-1])  # left empty: as if none were given
    return value


def _put(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[leaf] = value

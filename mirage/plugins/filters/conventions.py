"""The ranking filters' conventions: MIRAGE's defaults beside the reference code's
(docs/conventions.md).

Top-p and top-k leave edge cases open that RAGEN's code settles differently from MIRAGE.
Each is an option of the filter (``filter.options``); the option ``convention`` sets
them all at once (``mirage``, the default, or ``ragen``), and an option given beside it
wins over the preset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Convention = Literal["mirage", "ragen"]
FullMass = Literal["positive", "every_eligible"]
NoMass = Literal["keep_eligible", "keep_none"]
Rounding = Literal["slack", "truncate"]


@dataclass(frozen=True)
class TopPConventions:
    """Linear top-p's edges (softmax top-p reads ``full_mass`` only).

    * ``selection_eps``: the mass to reach is rho * sum(scores) - selection_eps (RAGEN's
      ``selection_eps`` 0.01); with rho * sum below it nothing is kept;
    * ``full_mass``: at rho = 1, keep the groups with a positive score (``positive``, what
      the mass rule gives) or every eligible group (``every_eligible``);
    * ``no_mass``: a batch whose scores are all 0 keeps every eligible group
      (``keep_eligible``: all with ``include_zero``, none without) or none (``keep_none``,
      the paper's k* = 0);
    * ``zero_stops``: a group scoring 0 ends the walk, and a walk ended short of the mass
      keeps nothing (only ``keep: smallest`` with ``include_zero`` reaches one first).
    """

    selection_eps: float = 0.0
    full_mass: FullMass = "positive"
    no_mass: NoMass = "keep_eligible"
    zero_stops: bool = False


@dataclass(frozen=True)
class TopKConventions:
    """``rounding``: the count kept is max(1, int(rho * P + 1e-9)) (``slack``: 0.7 x 90
    keeps 63) or max(1, int(rho * P)) (``truncate``, RAGEN's: float 0.7 x 90 is
    62.99999999999999, so 62)."""

    rounding: Rounding = "slack"


TOP_P_PRESETS = {
    "mirage": TopPConventions(),
    "ragen": TopPConventions(selection_eps=0.01, full_mass="every_eligible", no_mass="keep_none",
                             zero_stops=True),
}
TOP_K_PRESETS = {"mirage": TopKConventions(), "ragen": TopKConventions(rounding="truncate")}


def resolve(presets: dict, convention: str, **given):
    """The preset ``convention`` of ``presets`` with every setting in ``given`` that is not
    None put over it."""
    if convention not in presets:
        raise ValueError(f"unknown filter convention {convention!r}; valid: {', '.join(presets)}")
    base = presets[convention]
    return type(base)(**{**base.__dict__, **{k: v for k, v in given.items() if v is not None}})

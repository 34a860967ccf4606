"""Warm-started policies shipped with the package, like a model hub's weights.

``policies/ENV/`` holds the default policy of environment ENV as a Hugging Face
directory (config, safetensors weights, tokenizer) and ``warmstart.json``: the warm
start's facts, its cache key (``warmstart_key``) and its ``provenance`` (the command and
commit that built it, the settings, the measured quality). A run whose warm-start cache
key equals a shipped policy's loads it instead of training; ``core warmstart ENV
--rebuild`` rebuilds and re-records one, and a test fails when the code would no longer
build a shipped policy under its key (tests/plugins/test_shipped_policies.py).
``policies/ENV-image/`` holds ENV's policy for image observations, a vision-language
model (:func:`policy_name`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

POLICIES = Path(__file__).resolve().parent / "policies"
FACTS_FILE = "warmstart.json"  # beside every saved warm start, shipped or cached


def policy_name(env: str, observation: str = "text") -> str:
    """The name a shipped policy of ``env`` goes by: the environment's, with ``-image``
    for its image observations."""
    return env if observation == "text" else f"{env}-{observation}"


def policy_of(config) -> str:
    """The shipped policy name a run config's warm start would be."""
    return policy_name(config.env.name, config.env.options.get("observation", "text"))


def split_name(name: str) -> tuple[str, str]:
    """(environment, observation) of a shipped policy's name."""
    env, _, observation = name.partition("-")
    return env, observation or "text"


def names() -> list[str]:
    """The shipped policies (environment names, ``ENV-image`` for image observations)."""
    return sorted(p.name for p in POLICIES.glob("*") if (p / FACTS_FILE).is_file())


def record(env: str) -> dict[str, Any] | None:
    """The shipped policy's ``warmstart.json`` for ``env``, or None."""
    facts = POLICIES / env / FACTS_FILE
    return json.loads(facts.read_text()) if facts.is_file() else None


def find(env: str, key: str) -> Path | None:
    """The shipped policy of ``env`` if it was built under cache key ``key``, else None."""
    found = record(env)
    return POLICIES / env if found is not None and found.get("warmstart_key") == key else None


def why_not(env: str, key: str) -> str:
    """Why no shipped policy serves warm start ``key`` of ``env``, in one clause."""
    found = record(env)
    if found is None:
        return f"no policy ships for {env!r} (shipped: {', '.join(names()) or 'none'})"
    if found.get("warmstart_key") == key:
        return f"the shipped {env!r} policy serves these settings"
    return (f"the {env!r} policy shipped with the package was built at other settings (the "
            f"defaults of `{found['provenance']['command']}`) or by other code: its key is "
            f"{found.get('warmstart_key')}, these settings' {key}")

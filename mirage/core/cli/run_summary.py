"""The lines ``core run`` prints when a run ends: how its policy moved from the first to
the last check of each headline metric, what the filter kept, where the policy came from."""

from __future__ import annotations

import json

from mirage.core.analysis import signature
from mirage.core.store.run_store import RunStore

# (metric, label): shown as first -> last value where the run recorded it
HEADLINES = (
    ("val/success", "validation success"),
    ("val_greedy/success", "validation success, greedy"),
    ("mi/first_turn/retrieval_acc", "first-turn retrieval accuracy"),
    ("mi/first_turn/h_cond", "first-turn H(Z|X)"),
)

SOURCES = {  # the local backend's warmstart_source fact
    "shipped": "the warm start shipped with the package",
    "cache": "the cached warm start",
    "built": "a warm start trained for this run (cached for the next)",
}


def summary_lines(store: RunStore, run_id: str) -> list[str]:
    """Indented lines summing up a stored run (none for a run without steps)."""
    lines = []
    for name, label in HEADLINES:
        values = store.metrics(run_id, name)
        if values:
            (first, _, start), (last, _, end) = values[0], values[-1]
            lines.append(f"{label}: {start:.3f} (step {first}) -> {end:.3f} (step {last})"
                         + _chance(store, run_id, name))
    regimes = signature.run_checks(store, run_id)
    if regimes:
        lines.append(f"reasoning regime: {signature.describe(regimes)} (`core show` states the rule)")
    kept = [value for _, _, value in store.metrics(run_id, "filter/kept_ratio")]
    if kept:
        lines.append(f"groups kept by the filter: {sum(kept) / len(kept):.2f} on average "
                     f"({min(kept):.2f}-{max(kept):.2f}) over {len(kept)} steps")
    backend = [e for e in store.events(run_id) if e["kind"] == "backend"]
    if backend:
        source = json.loads(backend[0]["message"]).get("warmstart_source")
        if source in SOURCES:
            lines.append(f"starting policy: {SOURCES[source]}")
    return [f"  {line}" for line in lines]


def _chance(store: RunStore, run_id: str, name: str) -> str:
    if not name.endswith("retrieval_acc"):
        return ""
    chance = store.metrics(run_id, name.replace("retrieval_acc", "retrieval_chance"))
    return f" (chance {chance[-1][2]:.3f})" if chance else ""

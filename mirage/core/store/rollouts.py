"""The store's sampled rollouts: a few trajectories per step, turn by turn, kept for
reading what the policy writes (the app's rollouts table). ``RunStore.record_step``
writes them with the step's other rows; ``RunStore.rollouts`` reads them back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb


@dataclass(frozen=True)
class RolloutRow:
    """One turn of a sampled trajectory: the prompt X it saw, its reasoning Z, its action
    (the answer text) and the turn's reward."""

    prompt_index: int
    sample_index: int
    turn: int
    prompt: str
    reasoning: str
    action: str
    reward: float


ROLLOUT_FIELDS = {
    "prompt_index": int, "sample_index": int, "turn": int, "prompt": str,
    "reasoning": str, "action": str, "reward": float,
}  # fmt: skip
_INSERT_ROLLOUTS = (
    "INSERT INTO rollouts SELECT ?, ?, unnest(?::INTEGER[]), unnest(?::INTEGER[]),"
    " unnest(?::INTEGER[]), unnest(?::TEXT[]), unnest(?::TEXT[]), unnest(?::TEXT[]),"
    " unnest(?::DOUBLE[])"
)
# the order a run's rollouts read back in
ROLLOUT_ORDER = "step, sample_index, prompt_index, turn"


def replace_rollouts(con: duckdb.DuckDBPyConnection, run_id: str, step: int,
                     rows: Sequence[RolloutRow]) -> None:
    """Inside the caller's transaction: the run's rollouts at ``step`` become ``rows``."""
    con.execute("DELETE FROM rollouts WHERE run_id = ? AND step = ?", [run_id, step])
    if rows:
        columns = [[cast(getattr(r, f)) for r in rows] for f, cast in ROLLOUT_FIELDS.items()]
        con.execute(_INSERT_ROLLOUTS, [run_id, step, *columns])


def rollouts_query(run_id: str, step: int | None) -> tuple[str, list]:
    """The SQL and parameters that read a run's rollouts (all, or one step's) as
    ``step`` + RolloutRow fields, by step, sample, prompt and turn."""
    where, params = ("", [run_id]) if step is None else (" AND step = ?", [run_id, step])
    return (f"SELECT step, {', '.join(ROLLOUT_FIELDS)} FROM rollouts WHERE run_id = ?{where}"
            f" ORDER BY {ROLLOUT_ORDER}", params)

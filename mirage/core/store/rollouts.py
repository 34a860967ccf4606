"""The store's sampled rollouts: a few trajectories per step, turn by turn, kept for
reading what the policy writes (the app's rollouts table). ``RunStore.record_step``
writes them with the step's other rows; ``RunStore.rollouts`` reads them back.

A turn of an environment in image mode keeps the pictures its prompt showed (one per
``IMAGE_MARK`` in ``prompt``) as PNG bytes in the row's ``images`` column (``BLOB[]``,
schema 7): a picture is a few hundred bytes to a few kilobytes, so it stays in the one
file with the row it belongs to and travels with it (``core export``, ``import_runs``,
copying the file). A text turn keeps an empty list."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class RolloutRow:
    """One turn of a sampled trajectory: the prompt X it saw, its reasoning Z, its action
    (the answer text), the turn's reward and the pictures X showed (PNG bytes, in the
    order of X's ``IMAGE_MARK``s; empty for text)."""

    prompt_index: int
    sample_index: int
    turn: int
    prompt: str
    reasoning: str
    action: str
    reward: float
    images: tuple[bytes, ...] = ()


def png_list(images: Sequence[bytes]) -> list[bytes]:
    """``images`` as the column stores them. TypeError for anything but bytes (store an
    ``Image`` as its ``.png``), ValueError for bytes that are not a PNG."""
    stored = []
    for image in images:
        if not isinstance(image, (bytes, bytearray)):
            raise TypeError(f"RolloutRow.images holds PNG bytes (an Image's .png), not {type(image).__name__}")
        if not image.startswith(PNG_SIGNATURE):
            raise ValueError(f"RolloutRow.images holds PNG bytes; got {len(image)} bytes without "
                             "the PNG signature")
        stored.append(bytes(image))
    return stored


ROLLOUT_FIELDS = {
    "prompt_index": int, "sample_index": int, "turn": int, "prompt": str,
    "reasoning": str, "action": str, "reward": float, "images": png_list,
}  # fmt: skip
_INSERT_ROLLOUTS = (
    f"INSERT INTO rollouts (run_id, step, {', '.join(ROLLOUT_FIELDS)})"
    " SELECT ?, ?, unnest(?::INTEGER[]), unnest(?::INTEGER[]),"
    " unnest(?::INTEGER[]), unnest(?::TEXT[]), unnest(?::TEXT[]), unnest(?::TEXT[]),"
    " unnest(?::DOUBLE[]), unnest(?::BLOB[][])"
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
    ``step`` + RolloutRow fields, by step, sample, prompt and turn (``images``: a list of
    PNG bytes, empty for a text turn)."""
    where, params = ("", [run_id]) if step is None else (" AND step = ?", [run_id, step])
    return (f"SELECT step, {', '.join(ROLLOUT_FIELDS)} FROM rollouts WHERE run_id = ?{where}"
            f" ORDER BY {ROLLOUT_ORDER}", params)

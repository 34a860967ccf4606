"""What ``core show`` says of a run's stored rollout turns (mirage/core/store/rollouts.py):
a one-line summary, one step's turns with their reasoning and action (``--rollouts
STEP``), and their pictures written out as PNG files (``--pictures FOLDER``).

A turn of an image run names each picture its prompt showed, e.g. ``[picture 64x64, PNG
0.6 kB]``; its prompt text holds an ``<image>`` mark where the picture went."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mirage.core.rl.image import Image


def picture_label(png: bytes) -> str:
    """``[picture WIDTHxHEIGHT, PNG 1.1 kB]``: one stored picture, as the text shows it."""
    width, height = Image(bytes(png)).size
    return f"[picture {width}x{height}, PNG {len(png) / 1000:.1f} kB]"


def stored_steps(rows: Sequence[dict[str, Any]]) -> list[int]:
    return sorted({row["step"] for row in rows})


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How many turns are stored, at which steps, how many show pictures (``--json``)."""
    return {"turns": len(rows), "steps": stored_steps(rows),
            "turns_with_pictures": sum(1 for row in rows if row["images"])}


def summary_line(rows: Sequence[dict[str, Any]]) -> str:
    """``rollouts 60 turns at 3 steps (0 to 2); 12 show a picture``, or ``none stored``."""
    if not rows:
        return "rollouts none stored"
    steps = stored_steps(rows)
    pictured = summary(rows)["turns_with_pictures"]
    span = f"step {steps[0]}" if len(steps) == 1 else f"{len(steps)} steps ({steps[0]} to {steps[-1]})"
    return (f"rollouts {len(rows)} turns at {span}; "
            + (f"{pictured} show a picture" if pictured else "text only")
            + " (core show RUN --rollouts STEP prints a step's turns)")


def turn_lines(step: int, rows: Sequence[dict[str, Any]]) -> list[str]:
    """The turns stored at ``step``: who they are, their reward and pictures, then their
    reasoning and action."""
    trajectories = len({(row["prompt_index"], row["sample_index"]) for row in rows})
    lines = [f"rollouts at step {step} ({len(rows)} turns of {trajectories} trajectories):"]
    for row in rows:
        pictures = "".join(f" {picture_label(png)}" for png in row["images"])
        lines.append(f"  prompt {row['prompt_index']}, sample {row['sample_index']}, turn {row['turn']}: "
                     f"reward {row['reward']:g}{pictures}")
        for title in ("reasoning", "action"):
            text = row[title].strip().splitlines() or [""]
            lines.append(f"    {title:<10}{text[0]}")
            lines += [f"    {'':<10}{more}" for more in text[1:]]
    return lines


def picture_name(row: dict[str, Any], index: int) -> str:
    """The file one picture is written to: its step, prompt, sample, turn and place."""
    return (f"step-{row['step']}_prompt-{row['prompt_index']}_sample-{row['sample_index']}"
            f"_turn-{row['turn']}_picture-{index}.png")


def write_pictures(rows: Sequence[dict[str, Any]], folder: Path) -> list[Path]:
    """Write every picture of ``rows`` into ``folder`` (created; same names replaced)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for row in rows:
        for index, png in enumerate(row["images"]):
            target = folder / picture_name(row, index)
            target.write_bytes(bytes(png))
            written.append(target)
    return written


def jsonable(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` for ``--json``: each picture as base64 text (as ``core export`` writes JSON lines)."""
    return [{**row, "images": [base64.b64encode(bytes(png)).decode("ascii") for png in row["images"]]}
            for row in rows]

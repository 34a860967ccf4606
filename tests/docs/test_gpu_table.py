"""docs/gpu.md's table of Qwen2.5 on 24 GB and 80 GB cards is the memory plan's own
(mirage/core/memory/cards.py): a change to the plan that moves a cell fails here until the
table is written again (``python -m mirage.core.memory.cards``)."""

from __future__ import annotations

from pathlib import Path

from mirage.core.memory.cards import card_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "gpu.md"
START, END = "<!-- plan table: python -m mirage.core.memory.cards -->\n", "\n<!-- end of plan table -->"


def test_the_docs_card_table_is_the_plans():
    text = DOC.read_text()
    written = text[text.index(START) + len(START):text.index(END)]
    assert written == card_table()

"""How many rows a backend scores at once: at most ``SCORE_CHUNK`` (on CPU, chunks of 128
score faster than one big batch: MEASURED.md), and fewer where one chunk's logits would
pass ``LOGITS_BUDGET`` bytes. Scoring materialises a float32 logit for every token of the
row and every word of the vocabulary: 128 rows of 256 tokens over Qwen2.5's 151,936 words
are 20 GiB, more than the model. The memory plan (mirage/core/memory) reads the same rule."""

from __future__ import annotations

SCORE_CHUNK = 128
LOGITS_BUDGET = 2 * 1024**3  # bytes of float32 logits in one chunk


def score_rows(width: int, vocab: int) -> int:
    """Rows per scoring chunk for rows ``width`` tokens wide over a ``vocab``-word vocabulary."""
    per_row = max(1, width) * max(1, vocab) * 4
    return max(1, min(SCORE_CHUNK, LOGITS_BUDGET // per_row))

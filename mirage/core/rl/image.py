"""An image observation: a value that flows through the batch beside the text.

An environment in image mode shows its state as an RGB picture. The prompt text marks
where each picture goes with ``IMAGE_MARK`` (one mark per picture, in order), and the
turn carries the pictures in the same order (``Turn.images``); a vision-language backend
replaces each mark with its model's image tokens. Pictures are kept as PNG bytes: exact
(lossless), small (a 6 x 6 room of 16-pixel tiles is about a kilobyte), hashable, and what
the store and the app keep and show as they are.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cached_property

import numpy as np

IMAGE_MARK = "<image>"
"""Where a picture goes in a prompt's text: one mark per entry of ``Turn.images``."""


@dataclass(frozen=True)
class Image:
    """One RGB picture, held as PNG bytes (compared and hashed by them)."""

    png: bytes

    @classmethod
    def from_array(cls, pixels: np.ndarray) -> Image:
        """From an ``(height, width, 3)`` uint8 array."""
        from PIL import Image as PILImage

        if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
            raise ValueError(f"an image is a (height, width, 3) uint8 array, not {pixels.dtype} {pixels.shape}")
        buffer = io.BytesIO()
        PILImage.fromarray(pixels, "RGB").save(buffer, format="PNG", optimize=False, compress_level=6)
        return cls(buffer.getvalue())

    @cached_property
    def pil(self):
        """The picture as a ``PIL.Image`` in RGB (what image processors take)."""
        from PIL import Image as PILImage

        return PILImage.open(io.BytesIO(self.png)).convert("RGB")

    def array(self) -> np.ndarray:
        """The pixels, ``(height, width, 3)`` uint8."""
        return np.asarray(self.pil, dtype=np.uint8)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels."""
        return self.pil.size


def count_marks(text: str) -> int:
    """How many pictures a prompt text places."""
    return text.count(IMAGE_MARK)

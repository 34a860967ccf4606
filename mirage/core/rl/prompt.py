"""A prompt as a backend takes it: the context's token ids, with the pictures it shows.

``Prompt`` is a list of token ids (what every backend has always taken, so a backend
that reads text only needs no change) that also carries ``images``: the pictures of the
turn (``Turn.images``), in the order the ids place them. A vision-language backend reads
them beside the ids; the identity of a prompt is both (``Prompt.key``): in image mode the
texts of different rooms are the same words, and only the picture tells them apart.
"""

from __future__ import annotations

from typing import Iterable

from mirage.core.rl.image import Image


class Prompt(list):
    """Token ids of a context (a ``list[int]``) and the pictures they show (``images``)."""

    __slots__ = ("images",)

    def __init__(self, ids: Iterable[int] = (), images: Iterable[Image] = ()):
        super().__init__(ids)
        self.images: tuple[Image, ...] = tuple(images)

    def key(self) -> tuple[tuple[int, ...], tuple[Image, ...]]:
        """What makes two prompts the same prompt: their ids and their pictures."""
        return tuple(self), self.images

    def __reduce__(self):
        return Prompt, (list(self), self.images)

    def __repr__(self) -> str:
        shown = f", {len(self.images)} images" if self.images else ""
        return f"Prompt({list.__repr__(self)}{shown})"


def prompt_key(ids: list[int]) -> tuple:
    """``Prompt.key`` of ``ids``, whether or not they carry pictures (plain lists: none)."""
    return ids.key() if isinstance(ids, Prompt) else (tuple(ids), ())


def images_of(prompts: Iterable[list[int]]) -> list[Image]:
    """The pictures of ``prompts``, in order (a plain list of ids has none)."""
    return [image for ids in prompts for image in getattr(ids, "images", ())]


def encode_prompt(backend, text: str, images: Iterable[Image] = ()) -> Prompt:
    """``text`` (with the pictures its ``IMAGE_MARK``s place) as ``backend`` encodes it.
    Without pictures the backend's ``encode_prompt(text)`` is called as it always was (a
    backend written for text keeps working); with them ``encode_prompt(text, images)``,
    which only a backend that reads pictures has (validation refuses image mode on any
    other, ``Backend.images_problem``)."""
    images = tuple(images)
    ids = backend.encode_prompt(text, images) if images else backend.encode_prompt(text)
    return Prompt(ids, images)

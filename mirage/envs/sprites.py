"""The grid worlds' pictures: 16-pixel tile sprites drawn by this module's own code.

A picture is the environment's symbol grid (the letters of its text map) with each
symbol drawn as its tile. Every tile of one environment differs from the others in its
pixels, so the picture determines the grid exactly: ``read_grid`` recovers it from the
pixels alone (the test that rendering is faithful). Drawing is plain numpy: deterministic,
no fonts, no randomness.
"""

from __future__ import annotations

import numpy as np

from mirage.core.rl.image import Image

TILE = 16
_YY, _XX = np.mgrid[0:TILE, 0:TILE]
_CENTRE = (TILE - 1) / 2


def _fill(colour: tuple[int, int, int]) -> np.ndarray:
    return np.broadcast_to(np.array(colour, dtype=np.uint8), (TILE, TILE, 3)).copy()


def _disc(tile: np.ndarray, radius: float, colour: tuple[int, int, int]) -> np.ndarray:
    tile = tile.copy()
    tile[(_YY - _CENTRE) ** 2 + (_XX - _CENTRE) ** 2 <= radius ** 2] = colour
    return tile


def _frame(tile: np.ndarray, inset: int, width: int, colour: tuple[int, int, int]) -> np.ndarray:
    tile = tile.copy()
    inner = (_YY >= inset) & (_YY < TILE - inset) & (_XX >= inset) & (_XX < TILE - inset)
    core = (_YY >= inset + width) & (_YY < TILE - inset - width) & (_XX >= inset + width) & (_XX < TILE - inset - width)
    tile[inner & ~core] = colour
    return tile


def _cross(tile: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    tile = tile.copy()
    tile[(np.abs(_YY - _XX) <= 1) | (np.abs(_YY + _XX - (TILE - 1)) <= 1)] = colour
    return tile


def _bricks(colour: tuple[int, int, int], mortar: tuple[int, int, int]) -> np.ndarray:
    tile = _fill(colour)
    tile[_YY % 4 == 3] = mortar
    offset = np.where((_YY // 4) % 2 == 0, 0, 4)
    tile[(_XX + offset) % 8 == 7] = mortar
    return tile


def _diamond(tile: np.ndarray, radius: int, colour: tuple[int, int, int]) -> np.ndarray:
    tile = tile.copy()
    tile[np.abs(_YY - _CENTRE) + np.abs(_XX - _CENTRE) <= radius] = colour
    return tile


def _figure(tile: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    """A person: a head over a body."""
    tile = tile.copy()
    tile[(_YY - 4) ** 2 + (_XX - _CENTRE) ** 2 <= 6.5] = colour
    tile[(_YY >= 7) & (_YY <= 13) & (np.abs(_XX - _CENTRE) <= 3)] = colour
    return tile


_FLOOR = _frame(_fill((70, 70, 78)), 0, 1, (90, 90, 100))
_TARGET = _frame(_FLOOR, 3, 2, (40, 200, 90))
_BOX = _cross(_frame(_fill((205, 150, 60)), 1, 1, (120, 80, 30)), (120, 80, 30))

SOKOBAN_TILES: dict[str, np.ndarray] = {
    "#": _bricks((160, 65, 45), (210, 200, 190)),
    "_": _FLOOR,
    "O": _TARGET,
    "X": _BOX,
    "V": _frame(_BOX, 0, 2, (40, 200, 90)),
    "P": _figure(_FLOOR, (60, 120, 235)),
    "S": _figure(_TARGET, (60, 120, 235)),
}
"""Sokoban: wall, floor, target, box, box on target, player, player on target."""

_ICE = _fill((190, 225, 250))
_ICE[(_YY * 5 + _XX * 3) % 11 == 0] = (245, 250, 255)

FROZENLAKE_TILES: dict[str, np.ndarray] = {
    "_": _ICE,
    "O": _disc(_ICE, 6.2, (25, 40, 90)),
    "G": _diamond(_ICE, 6, (235, 185, 30)),
    "P": _figure(_ICE, (215, 50, 50)),
}
"""FrozenLake: frozen ice, hole, goal, player."""


def draw_grid(grid: list[list[str]], tiles: dict[str, np.ndarray]) -> Image:
    """The picture of a symbol grid, one ``TILE`` x ``TILE`` tile a cell."""
    rows = [np.concatenate([tiles[symbol] for symbol in row], axis=1) for row in grid]
    return Image.from_array(np.ascontiguousarray(np.concatenate(rows, axis=0)))


def read_grid(image: Image, tiles: dict[str, np.ndarray]) -> list[list[str]]:
    """The symbol grid a picture shows, read from its pixels alone; ValueError where a
    tile is none of ``tiles``."""
    pixels = image.array()
    height, width = pixels.shape[0] // TILE, pixels.shape[1] // TILE
    if pixels.shape[:2] != (height * TILE, width * TILE):
        raise ValueError(f"a {pixels.shape[1]}x{pixels.shape[0]} picture is not whole {TILE}-pixel tiles")
    grid = []
    for r in range(height):
        row = []
        for c in range(width):
            tile = pixels[r * TILE:(r + 1) * TILE, c * TILE:(c + 1) * TILE]
            found = [symbol for symbol, sprite in tiles.items() if np.array_equal(tile, sprite)]
            if len(found) != 1:
                raise ValueError(f"the tile at row {r} col {c} is no known sprite")
            row.append(found[0])
        grid.append(row)
    return grid

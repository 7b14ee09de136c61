"""Masks over a frame's tile grid (pixel.py's tiles): grown, boxed, grouped in blocks.

The screen history (screen_history.py) keeps its registers per tile and per block of
``block`` x ``block`` tiles; these are the shape operations it needs on them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from actors.loop_detector.pixel import Frame, tile_max

Mask = npt.NDArray[np.bool_]

_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)
"""Set bits of each byte (numpy < 2 has no bitwise_count)."""


def popcount8(values: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Set bits of each byte."""
    counted: npt.NDArray[np.uint8] = _BITS[values]
    return counted


def dilate(mask: Mask, reach: int) -> Mask:
    """``mask`` grown by ``reach`` tiles in every direction (a square neighbourhood)."""
    out = mask.copy()
    for _ in range(reach):
        grown = out.copy()
        grown[1:] |= out[:-1]
        grown[:-1] |= out[1:]
        grown[:, 1:] |= grown[:, :-1].copy()
        grown[:, :-1] |= grown[:, 1:].copy()
        out = grown
    return out


def box_of(mask: Mask) -> tuple[float, float, float, float] | None:
    """The box around ``mask``'s tiles as fractions of the grid; None if it is empty."""
    rows = np.flatnonzero(mask.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(mask.any(axis=0))
    h, w = mask.shape
    return (round(float(cols[0]) / w, 3), round(float(rows[0]) / h, 3),
            round(float(cols[-1] + 1 - cols[0]) / w, 3),
            round(float(rows[-1] + 1 - rows[0]) / h, 3))


def blocks_of(mask: Mask, block: int) -> Mask:
    """Per block of ``block`` x ``block`` tiles, whether one of its tiles is set."""
    blocks: Mask = tile_max(mask.view(np.uint8), block).astype(bool)
    return blocks


def as_tiles(blocks: Mask, block: int, shape: tuple[int, int]) -> Mask:
    """A block mask spread back over the ``shape`` tile grid."""
    grown: Mask = np.repeat(np.repeat(blocks, block, axis=0), block,
                            axis=1)[:shape[0], :shape[1]]
    return grown


def zone(mask: Mask, block: int) -> Mask:
    """The blocks holding ``mask``'s tiles and the blocks around them, as tiles."""
    return as_tiles(dilate(blocks_of(mask, block), 1), block, mask.shape)


def caret_sized(mask: Mask) -> bool:
    """Whether ``mask``'s tiles fit in a caret: one column, at most two tiles tall."""
    cols = np.flatnonzero(mask.any(axis=0))
    return cols.size == 1 and int(np.count_nonzero(mask)) <= 2


def caret_change(before: Frame, after: Frame, mask: Mask, tile: int, level: int) -> bool:
    """Whether ``mask``'s tiles changed as a caret blinks: they fit in a caret
    (``caret_sized``), or, in one column of tiles but taller (a larger font's caret), what
    moved is one pixel column (``caret_stroke``)."""
    if caret_sized(mask):
        return True
    return int(np.count_nonzero(mask.any(axis=0))) == 1 and caret_stroke(
        before, after, mask, tile, level)


def caret_stroke(before: Frame, after: Frame, mask: Mask, tile: int, level: int) -> bool:
    """Whether what changed on ``mask``'s tiles between two frames is a caret shown or
    hidden: every pixel that moved by more than ``level`` in one pixel column, two pixels
    tall or more (a glyph turned into another changes strokes across columns, or a
    pixel or so of a small digit; docs/loop-detection.md)."""
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return False
    area = (slice(int(rows[0]) * tile, (int(rows[-1]) + 1) * tile),
            slice(int(cols[0]) * tile, (int(cols[-1]) + 1) * tile))
    a, b = before[area], after[area]
    moved = (np.maximum(a, b) - np.minimum(a, b)) > level
    inside = np.repeat(np.repeat(mask[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1], tile,
                                 axis=0), tile, axis=1)[:moved.shape[0], :moved.shape[1]]
    moved &= inside
    return int(np.count_nonzero(moved.any(axis=0))) == 1 and int(
        np.count_nonzero(moved.any(axis=1))) >= 2


def inner_of(window: Mask) -> Mask:
    """A window's tiles but its edge tiles, which hold the pixels of both sides."""
    return ~dilate(~window, 1)


def noise_around(ambient: Mask, acted_in: Mask | None, reach: int, block: int) -> Mask:
    """The places seen changing by themselves (``ambient``) and the tiles (``reach``) and
    blocks around them: what moves by itself (top's numbers, a second hand, a spinner)
    keeps moving into tiles next to those seen. Not across the edge of the window acted
    in: another window's clock cannot draw inside it (a dialog opened over a clock,
    typed into; docs/loop-detection.md)."""
    if not ambient.any():
        return ambient
    spread = dilate(ambient, reach) | zone(ambient, block)
    if acted_in is None or not acted_in.any():
        return spread
    inner = inner_of(acted_in)
    own = ambient & inner
    if not own.any():
        return spread & ~inner
    return (spread & ~inner) | dilate(own, reach) | zone(own, block)

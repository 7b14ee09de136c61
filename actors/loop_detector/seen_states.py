"""States seen: how far a new frame's tiles are from every older frame of the ring (the
least difference per tile, by which a tile shows a state seen: screen_history.py
``_novel``), and a click that went back to one (docs/loop-detection.md "a state seen")."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from actors.loop_detector.pixel import Frame, PixelParams, TileMap, tile_difference
from actors.loop_detector.tile_masks import Mask


def least_differences(older: Sequence[Frame], last: Frame, frame: Frame, pixel: PixelParams,
                      seen_level: int) -> tuple[TileMap, TileMap]:
    """Per tile of ``frame``, its least difference from the ``older`` frames; and the same
    by glyph: against each older frame, a tile beside it that moved since ``last`` by
    less than a change (more than ``seen_level``) yet differs from that frame by more
    than one counts as the tile's own difference. A label's digit spans two tiles, and
    one older frame must show both halves: a '3' whose lower half looks like a '1''s is
    no '1'."""
    since = tile_difference(last, frame, pixel)
    moved = (since > seen_level) & (since <= pixel.level)
    nearest = np.full(since.shape, 255, dtype=np.uint8)
    by_glyph = nearest.copy()
    for old in older:
        difference = tile_difference(old, frame, pixel)
        np.minimum(nearest, difference, out=nearest)
        beside = spread_max(difference, moved)
        beside[beside <= pixel.level] = 0
        np.minimum(by_glyph, np.maximum(difference, beside), out=by_glyph)
    return nearest, by_glyph


def spread_max(values: TileMap, mask: Mask) -> npt.NDArray[np.uint8]:
    """Per tile, the largest of ``values`` over the tiles of ``mask`` in its 3x3
    neighbourhood (0 where none is)."""
    src = np.where(mask, values, 0).astype(np.uint8)
    out = src.copy()
    np.maximum(out[1:], src[:-1], out=out[1:])
    np.maximum(out[:-1], src[1:], out=out[:-1])
    rows = out.copy()
    np.maximum(out[:, 1:], rows[:, :-1], out=out[:, 1:])
    np.maximum(out[:, :-1], rows[:, 1:], out=out[:, :-1])
    return out


def went_back(seen: Mask, novel: Mask, big: int, least_new: int) -> bool:
    """Whether a click's change went back to a state seen: ``seen`` (tiles changed to
    content an older frame showed) covers ``big`` tiles at least (a dialog or a menu
    opened again as it was) and fewer than ``least_new`` tiles of new content (``novel``)
    came where it acted: a clock's tick or a spinner's phase caught with the return, no
    progress. Not for typing or a key: what they write is new content."""
    return int(np.count_nonzero(novel)) < least_new and int(np.count_nonzero(seen)) >= big

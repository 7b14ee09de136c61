"""The whole monitor read as horizontal strips, each kept by its own pixels.

A strip is a band of rows read alone, with ``seam`` rows of its neighbours above and below
it; it keeps only the lines whose middle row is its own, so a line up to ``seam`` rows
high is whole in the strip that keeps it and given once. Read this way, the words of a
strip depend on the pixels of its crop alone: a strip whose crop has the same pixels as
one read before gets the same words without Tesseract, and a step of a replay that
changed one part of the screen (a field typed into, a focus ring, a caret) reads only
the strips that part touches (docs/grounding.md, "Speed"). Two strips are the two halves
read at once that the reader has always used: the same reading.

Pure: rows and pixels in, geometry, keys and the joined words out.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from PIL import Image

from agent.grounding.text import Word


@dataclass(frozen=True)
class Strip:
    """Rows ``top .. bottom`` are read; the lines whose middle row is in ``own_from ..
    own_to`` are this strip's (rows of the whole image)."""

    top: int
    bottom: int
    own_from: int
    own_to: int


StripKey = tuple[Strip, int, bytes]
"""A strip, the image's width and a digest of the crop's pixels: what tells two readings
of a strip apart. Never a time: an unchanged strip is one with the same pixels."""


def strips(height: int, count: int, seam: int) -> list[Strip]:
    """``count`` strips of about equal height over ``height`` rows, each read with ``seam``
    rows around it; fewer when a strip would be lower than ``2 * seam`` (one: the image
    is read whole)."""
    n = max(1, min(count, height // (2 * seam)))
    if n == 1:
        return [Strip(0, height, 0, height)]
    cuts = [height * i // n for i in range(n + 1)]
    return [Strip(max(0, cuts[i] - seam), min(height, cuts[i + 1] + seam), cuts[i],
                  cuts[i + 1]) for i in range(n)]


def strip_keys(grey: Image.Image, parts: Sequence[Strip]) -> list[StripKey]:
    """The key of each strip of ``grey`` (mode ``L``: one byte a pixel): its crop's rows,
    digested."""
    if grey.mode != "L":
        raise ValueError(f"strips are keyed on grey pixels, not {grey.mode}")
    rows = memoryview(grey.tobytes())
    w = grey.width
    return [(p, w, hashlib.blake2b(rows[p.top * w:p.bottom * w], digest_size=16).digest())
            for p in parts]


def join(readings: Sequence[Sequence[Word]]) -> list[Word]:
    """The strips' words top to bottom, their line numbers made one sequence (each
    strip's lines after the lines of the strips above it)."""
    out: list[Word] = []
    offset = 0
    for words in readings:
        out.extend(replace(w, line=w.line + offset) if offset else w for w in words)
        offset += 1 + max((w.line for w in words), default=-1)
    return out


class KeptStrips:
    """The last ``size`` strips read, by their key; the oldest out first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: OrderedDict[StripKey, tuple[Word, ...]] = OrderedDict()

    def recall(self, key: StripKey) -> list[Word] | None:
        kept = self._kept.get(key)
        if kept is None:
            return None
        self._kept.move_to_end(key)
        return list(kept)

    def remember(self, key: StripKey, words: Sequence[Word]) -> None:
        if self.size <= 0:
            return
        self._kept[key] = tuple(words)
        self._kept.move_to_end(key)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)

"""Dimmed regions: what a modal dialog's backdrop covers is never a click target.

A web page's modal dialog lays a dark, half-transparent layer over the page: everything
behind it stays legible (the OCR reads it, the anchor image still matches it, for the
match ignores brightness), but none of it can be clicked, and clicking where it shows
closes the dialog or does nothing. Behind such a layer even the page's white is grey:
the brightest pixel around a word is far below the brightest of the screen. Light text
on a dark ground (a dark menu, a banner) is not dimmed: its own text is bright
(docs/grounding.md, "Behind a dialog"). Pure: an image in, a mask out.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from PIL import Image

from agent.grounding.text import Box, Word

BLOCK = 4
"""The mask's pixels are blocks of this many screen pixels a side (the brightest of each)."""
AROUND = 5
"""The brightest within this many blocks (odd: a window centred on each block)."""
DIM_RATIO = 0.7
"""A place is dimmed when the brightest around it is under this share of the screen's
brightest: a backdrop of 30 % black leaves white at 0.7, the usual 40-60 % at 0.4-0.6."""
DIALOG_SIZE = (80, 40)
"""A dialog is at least this wide and high (screen pixels): smaller holes in a dimmed
region are a bright word or a picture."""
MAX_DIALOGS = 3
FILLED = 0.8
"""A dialog's undimmed blocks fill at least this share of its box."""
BRIGHTEST = 99.9
"""The screen's brightest level: this percentile of the blocks' (a few stray pixels do
not set it)."""


def _max_around(a: npt.NDArray[np.uint8], r: int) -> npt.NDArray[np.uint8]:
    """The maximum of each element's ``2r+1`` square neighbourhood (edges repeated)."""
    padded = np.pad(a, r, mode="edge")
    h, w = a.shape
    across = np.maximum.reduce([padded[:, i:i + w] for i in range(2 * r + 1)])
    out: npt.NDArray[np.uint8] = np.maximum.reduce([across[i:i + h]
                                                   for i in range(2 * r + 1)])
    return out


class Dimmed:
    """The dimmed blocks of one screen (module docstring)."""

    def __init__(self, image: Image.Image) -> None:
        grey = np.asarray(image.convert("L"))
        h, w = grey.shape[0] // BLOCK * BLOCK, grey.shape[1] // BLOCK * BLOCK
        # Maxima by slices (a strided reshape's max is several times slower).
        rows = np.maximum.reduce([grey[i:h:BLOCK, :w] for i in range(BLOCK)])
        blocks = np.maximum.reduce([rows[:, i::BLOCK] for i in range(BLOCK)])
        around = _max_around(blocks, AROUND // 2)
        counts = np.cumsum(np.bincount(blocks.ravel(), minlength=256))
        level = int(np.searchsorted(counts, BRIGHTEST / 100 * counts[-1])) if blocks.size \
            else 0
        self.mask: npt.NDArray[np.bool_] = around < DIM_RATIO * level

    def covers(self, box: Box) -> bool:
        """Whether the middle of ``box`` (screen pixels) is dimmed."""
        if not self.mask.size:
            return False
        x = min(self.mask.shape[1] - 1, max(0, int(box[0] + box[2] / 2) // BLOCK))
        y = min(self.mask.shape[0] - 1, max(0, int(box[1] + box[3] / 2) // BLOCK))
        return bool(self.mask[y, x])

    @property
    def any(self) -> bool:
        return bool(self.mask.any())

    def dialogs(self, cap: int = MAX_DIALOGS) -> list[Box]:
        """The boxes (screen pixels) of the undimmed regions that dimmed ones enclose on
        all four sides: a modal dialog over its backdrop, whose own controls are read
        apart (its white on colour may not be read with the whole monitor)."""
        if not self.any:
            return []
        m = self.mask
        enclosed = ~m & (np.maximum.accumulate(m, axis=1)
                         & np.maximum.accumulate(m[:, ::-1], axis=1)[:, ::-1]
                         & np.maximum.accumulate(m, axis=0)
                         & np.maximum.accumulate(m[::-1], axis=0)[::-1])
        # Runs of each row joined to the run above them that they overlap: left, top,
        # right, bottom, the last row's run, and how many blocks.
        found: list[list[int]] = []
        for y in range(enclosed.shape[0]):
            edges = np.flatnonzero(np.diff(np.concatenate(([0], enclosed[y].astype(np.int8),
                                                           [0]))))
            for left, right in zip(edges[::2], edges[1::2], strict=True):
                for b in found:
                    if b[3] == y and left < b[5] and b[4] < right:
                        b[0], b[2], b[3] = min(b[0], int(left)), max(b[2], int(right)), y + 1
                        b[4], b[5], b[6] = int(left), int(right), b[6] + int(right - left)
                        break
                else:
                    found.append([int(left), y, int(right), y + 1, int(left), int(right),
                                  int(right - left)])
        # A dialog is a rectangle: its blocks fill its box (a window's frame does not).
        found = [b for b in found if b[6] >= FILLED * (b[2] - b[0]) * (b[3] - b[1])]
        # The mask took in the brightest around each block: the region is that much
        # wider than what is undimmed.
        edge = AROUND // 2 * BLOCK
        boxes = [(b[0] * BLOCK + edge, b[1] * BLOCK + edge, (b[2] - b[0]) * BLOCK - 2 * edge,
                  (b[3] - b[1]) * BLOCK - 2 * edge) for b in found]
        big = [b for b in boxes if b[2] >= DIALOG_SIZE[0] and b[3] >= DIALOG_SIZE[1]]
        return sorted(big, key=lambda b: -b[2] * b[3])[:cap]

    def front(self, words: list[Word]) -> list[Word]:
        """The words not in a dimmed region."""
        return words if not self.any else [w for w in words if not self.covers(w.box)]

    def behind(self, words: list[Word]) -> list[Word]:
        """The words in a dimmed region."""
        return [] if not self.any else [w for w in words if self.covers(w.box)]

"""Bands of colour across a screen, where light text on a coloured ground may stand.

A warning banner (white on red) is read poorly, or not at all, in the reading of the whole
monitor, and well alone in a crop of its band: when a label is not found, the bands are
read again apart (docs/grounding.md, "Coloured bands"). Pure: an image in, boxes out.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from agent.grounding.text import Box

MIN_SATURATION = 80
"""A pixel is coloured from this HSV saturation (0-255): greys, white and black are 0."""
MIN_WIDTH = 200
"""A row is part of a band when at least this many of its pixels are coloured."""
BAND_HEIGHT = (12, 80)
"""A band's height in pixels: lower is a rule or an underline, higher is a picture or a
coloured window, no banner."""
LETTER_SHARE = 0.25
"""Rows between two runs of coloured rows, each still coloured over this share of
``MIN_WIDTH``, join them: the band's own letters cross them (:func:`coloured_bands`)."""
MAX_BANDS = 3
"""At most this many bands are read (the widest): each costs a reading of its crop."""
PAD = 6
"""Pixels added around a band: the crop holds the band's edge as a frame for its text."""


def coloured_bands(image: Image.Image, cap: int = MAX_BANDS) -> list[Box]:
    """The widest ``cap`` bands of coloured rows of ``image``, each as the box around its
    coloured pixels with ``PAD`` around it, in ``image``'s pixels; top to bottom."""
    coloured = np.asarray(image.convert("HSV").getchannel("S")) >= MIN_SATURATION
    counts = coloured.sum(axis=1)
    full = counts >= MIN_WIDTH
    # The rows of a band's light letters leave less of it coloured: a white-on-blue
    # button at 150 % was two bands, each holding half of its letters. A run of rows at
    # least ``LETTER_SHARE`` coloured between two full runs is the same band.
    edges = np.flatnonzero(np.diff(np.concatenate(([0], full.astype(np.int8), [0]))))
    for end, start in zip(edges[1:-1:2], edges[2::2], strict=True):
        if start - end <= BAND_HEIGHT[1] and (counts[end:start] >= LETTER_SHARE * MIN_WIDTH).all():
            full[end:start] = True
    # Runs of full rows: where a row starts or ends one.
    edges = np.flatnonzero(np.diff(np.concatenate(([0], full.astype(np.int8), [0]))))
    found: list[Box] = []
    for top, bottom in zip(edges[::2], edges[1::2], strict=True):
        if not BAND_HEIGHT[0] <= bottom - top <= BAND_HEIGHT[1]:
            continue
        columns = np.flatnonzero(coloured[top:bottom].any(axis=0))
        left = max(0, int(columns[0]) - PAD)
        right = min(image.width, int(columns[-1]) + 1 + PAD)
        upper, lower = max(0, int(top) - PAD), min(image.height, int(bottom) + PAD)
        found.append((left, upper, right - left, lower - upper))
    widest = sorted(found, key=lambda b: -b[2])[:cap]
    return sorted(widest, key=lambda b: b[1])


STRIP_FLAT = 2.0
"""A row of pixels is blank when its grey levels spread less than this (std)."""
MAX_STRIPS = 8


def strips(image: Image.Image, box: Box, cap: int = MAX_STRIPS) -> list[Box]:
    """``box`` cut at its blank rows into strips of text (``PAD`` around each), at most
    ``cap`` of the tallest: a dialog read as one block loses a row of buttons set right
    under a paragraph, each row read apart does not (docs/grounding.md, "Behind a
    dialog")."""
    left, top, w, h = box
    # Inside its edges: a dialog's border or rounded corners make every row uneven.
    inner = min(PAD, w // 4)
    grey = np.asarray(image.convert("L").crop((left + inner, top, left + w - inner, top + h)),
                      dtype=np.float32)
    inked = grey.std(axis=1) >= STRIP_FLAT
    edges = np.flatnonzero(np.diff(np.concatenate(([0], inked.astype(np.int8), [0]))))
    runs = [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)
            if b - a >= 6]  # shorter: a rule or a border, not text
    found = []
    for i, (start, end) in enumerate(runs):
        # A row of bordered buttons needs room above and below (cut tight, Tesseract read
        # nothing there), but none of the next row's ink: half the blank gap at most.
        room_above = start - (runs[i - 1][1] if i else 0)
        room_below = (runs[i + 1][0] if i + 1 < len(runs) else h) - end
        pad = max(PAD, (end - start) // 2)
        upper = max(0, start - min(pad, max(PAD, room_above // 2)))
        lower = min(h, end + min(pad, max(PAD, room_below // 2)))
        found.append((left, top + upper, w, lower - upper))
    tallest = sorted(found, key=lambda b: -b[3])[:cap]
    return sorted(tallest, key=lambda b: b[1])

"""Ink the whole monitor's reading left unread, and links told apart by their underlines.

Tesseract reads the monitor as one image with one threshold: light grey links on a light
page (a web application's side menu, a "Répondre" under a message) fall on the page's side
of it and are not read at all, not even as unsure words. When a label is not found, the
places where the screen has ink (a local contrast) that no word read covers are cut into
lines and read apart, their contrast stretched, closer (docs/grounding.md, "Unread ink").
Two links set one space apart ("Répondre Archiver") are read as one phrase, in which
neither label scores; each has its own underline, and the gap between two underlines
cuts the phrase (:func:`split_at_underlines`). Pure: an image and words in, boxes or
words out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from agent.grounding.text import Box, Word

INK_CONTRAST = 40
"""A pixel is ink when the grey levels within one pixel of it spread this much or more:
light grey text on white (about 80) is, a table's rule or a card's border (under 30) is
not."""
RULE_LENGTH = (48, 160)
"""Ink in a vertical run this long or a horizontal run this long is a border or a rule,
not text: it would join the lines of text it runs beside."""
COVER_PAD = 3
"""Pixels around a word read that its ink still belongs to."""
COVER_CONF = 0.5
"""A word read with less confidence than this covers no ink: a light grey link read in a
wide part (a page's whole light background read as a coloured band) comes out as
nonsense at a confidence near 0 ("SINEEMENLE" for "Comptes rendus"), and is read apart
as unread ink would be (:func:`covering`)."""
COLUMN_GAP = 24
"""Blank columns this wide part two columns of a page (a side menu, the content)."""
LINE_HEIGHT = (5, 60)
"""A line of unread ink is this high (pixels): lower is a speck, higher is a picture."""
MIN_INK = 12
"""Fewer ink pixels than this in a place: a speck, nothing to read."""
MAX_UNREAD = 32
"""At most this many places are read (the largest): each costs a small reading."""
PAD = 4
"""Pixels of background kept around a place read."""
INK_SCALE = 2.0
"""Places are read at this scale, like the phrases read closer."""


def _in_runs(mask: npt.NDArray[np.bool_], length: int) -> npt.NDArray[np.bool_]:
    """The pixels of ``mask`` on a run of ``length`` or more down its columns."""
    n = mask.shape[0]
    if n < length:
        return np.zeros_like(mask)
    zero = np.zeros((1, mask.shape[1]), np.int32)
    total = np.concatenate([zero, np.cumsum(mask, axis=0, dtype=np.int32)])
    full = (total[length:] - total[:-length]) == length  # the run of ``length`` from row i
    starts = np.concatenate([zero, np.cumsum(full, axis=0, dtype=np.int32)])
    rows = np.arange(n)
    low = np.clip(rows - length + 1, 0, full.shape[0])
    high = np.clip(rows + 1, 0, full.shape[0])
    out: npt.NDArray[np.bool_] = (starts[high] - starts[low]) > 0
    return out


def ink(image: Image.Image) -> npt.NDArray[np.bool_]:
    """The text-like ink of ``image``: local contrast, borders and rules taken out."""
    grey = np.asarray(image.convert("L"), dtype=np.int16)
    h, w = grey.shape
    padded = np.pad(grey, 1, mode="edge")
    around = [padded[1 + dy:1 + dy + h, 1 + dx:1 + dx + w] for dy in (-1, 0, 1)
              for dx in (-1, 0, 1)]
    mask: npt.NDArray[np.bool_] = (np.maximum.reduce(around)
                                   - np.minimum.reduce(around)) >= INK_CONTRAST
    mask &= ~_in_runs(mask, RULE_LENGTH[0]) & ~_in_runs(mask.T, RULE_LENGTH[1]).T
    return mask


def _spans(flags: Any, join: int) -> list[tuple[int, int]]:
    """The runs of true ``flags`` (a row of booleans), joined across gaps of ``join`` or
    less."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], np.asarray(flags, np.int8), [0]))))
    out: list[tuple[int, int]] = []
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        if out and a - out[-1][1] <= join:
            out[-1] = (out[-1][0], int(b))
        else:
            out.append((int(a), int(b)))
    return out


def covering(words: Sequence[Word]) -> list[Box]:
    """The boxes of the words read surely enough to cover their ink (``COVER_CONF``)."""
    return [w.box for w in words if w.conf >= COVER_CONF]


def unread(image: Image.Image, covered: Sequence[Box],
           skip: Callable[[Box], bool] = lambda box: False,
           cap: int = MAX_UNREAD, words: Sequence[Word] = ()) -> list[Box]:
    """The places of ``image`` with ink that no box of ``covered`` (the words read) holds:
    cut into columns at wide blank columns, into lines at blank rows, into pieces at gaps
    wider than a line's height; ``skip`` (a dimmed place) set aside; the ``cap`` with the
    most ink, each with ``PAD`` around it and joined with the ``words`` of its row it
    touches (:func:`with_its_row`), top to bottom."""
    mask = ink(image)
    for left, top, w, h in covered:
        mask[max(0, top - COVER_PAD):top + h + COVER_PAD,
             max(0, left - COVER_PAD):left + w + COVER_PAD] = False
    found: list[tuple[int, Box]] = []
    for col_left, col_right in _spans(mask.any(axis=0), COLUMN_GAP):
        column = mask[:, col_left:col_right]
        for top, bottom in _spans(column.any(axis=1), 0):
            height = bottom - top
            if not LINE_HEIGHT[0] <= height <= LINE_HEIGHT[1]:
                continue
            line = column[top:bottom]
            for left, right in _spans(line.any(axis=0), max(8, height)):
                count = int(line[:, left:right].sum())
                box = (col_left + left, top, right - left, height)
                if right - left >= max(8, height // 2) and count >= MIN_INK and not skip(box):
                    found.append((count, box))
    size = image.size
    grey = np.asarray(image.convert("L"), dtype=np.int16)
    out = []
    for _, (left, top, w, h) in sorted(found, key=lambda f: -f[0])[:cap]:
        x0, y0 = max(0, left - PAD), max(0, top - PAD)
        box = (x0, y0, min(size[0], left + w + PAD) - x0, min(size[1], top + h + PAD) - y0)
        out.append(with_its_row(box, words))
        out.extend(_fills(grey, box))  # a fill alone: joined with its row, not inverted
    return sorted(dict.fromkeys(out), key=lambda b: (b[1], b[0]))


def with_its_row(place: Box, words: Sequence[Word]) -> Box:
    """``place`` joined with the words of its row it touches (a gap of at most its height,
    in turn along the row): a light grey link read in pieces, its words boxed short and
    the ink between them unread ("Aide en" and "ligne" around an unread "n li"), is read
    again whole, not as a piece between two phrases."""
    left, top, w, h = place
    right, bottom = left + w, top + h
    grown = True
    while grown:
        grown = False
        for word in words:
            x, y, ww, wh = word.box
            if not top <= y + wh / 2 <= bottom or x + ww < left - h or x > right + h:
                continue
            if x < left or x + ww > right:
                left, right, grown = min(left, x), max(right, x + ww), True
    return (left, top, right - left, h)


def _fills(grey: npt.NDArray[np.int16], box: Box) -> list[Box]:
    """The dark filled parts of a place that is otherwise light (a white-on-blue button
    beside the page's other text): read apart, each is wholly light on dark, and
    :func:`stretched` inverts it (the place as a whole, mostly light, is not)."""
    left, top, w, h = box
    part = grey[top:top + h, left:left + w]
    if part.size == 0:
        return []
    middle = (int(part.min()) + int(part.max())) / 2
    dark = np.median(part, axis=0) < middle
    if dark.all():
        return []
    out = []
    # Joined across a few columns: where light letters crowd a column, its middle value
    # is light.
    for a, b in _spans(dark, h // 3):
        if b - a < h:  # narrower than high: a letter's stroke, not a fill
            continue
        rows = _spans(np.median(part[:, a:b], axis=1) < middle, 2)
        r0, r1 = max(rows, key=lambda r: r[1] - r[0])
        if r1 - r0 >= LINE_HEIGHT[0] * 2:
            out.append((left + a, top + r0, b - a, r1 - r0))
    return out


def stretched(part: Image.Image) -> Image.Image:
    """``part`` in grey, its contrast stretched from its darkest to its lightest (the 1st
    and 99th percentiles), dark text on light: light grey text comes out black, and light
    text on a dark ground is inverted."""
    grey = np.asarray(part.convert("L"), dtype=np.float32)
    low, high = np.percentile(grey, (1, 99))
    if np.median(grey) < (low + high) / 2:  # the ground is the darker: light text
        grey, low, high = 255 - grey, 255 - high, 255 - low
    out = np.clip((grey - low) * (255 / max(float(high - low), 1.0)), 0, 255)
    return Image.fromarray(out.astype(np.uint8))


UNDERLINE_COVER = 0.95
"""A row under a word is its underline when it differs from the word's ground over this
share of the word's width (the gaps a descender leaves in it closed, :func:`_closed`),
and the rows just above and below its line (one or two rows thick) under
``UNDERLINE_ALONE`` of it: a thin full line, not the letters' middle nor their foot."""
UNDERLINE_ALONE = 0.6
UNDER_BOX = 4
"""Pixels under a word's box where its underline may still be (a descender may cross the
underline, so the lower half of the box is looked at too)."""
UNDERLINE_ROWS = 2
"""An underline is at most this many rows thick (two at 150 %)."""
UNDERLINE_FROM = 0.7
"""An underline is this far down a word's box or lower (0.74 and more on the set's links,
a descender boxed with them): higher, a row of the letters' middle that looks like one
(white text on a filled button, "Valider les résultats", read at 0.55 of its height)."""
BOX_SLACK = 0.25
"""A word's box may run past its ink by this share of its height at each end (seen: a
"Page" boxed three pixels left of its "P"): the underline is looked for inside it."""


def _line(marks: npt.NDArray[np.bool_], row: int, widest: int) -> npt.NDArray[np.bool_]:
    """Row ``row`` of ``marks``, its gaps beside a descender closed. Chromium skips an
    underline's ink around a descender ("g", "p"), so the underline under "Page" is
    broken; a gap is closed only if at most ``widest`` wide and, within two pixels of it,
    the rows under the line hold ink (the descender's foot): the gaps between letters at
    their foot have nothing under them."""
    line: npt.NDArray[np.bool_] = marks[row].copy()
    below: npt.NDArray[np.bool_] = np.any(marks[row + 1:row + 3], axis=0)
    for a, b in _spans(~line, 0):
        if a > 0 and b < len(line) and b - a <= widest and below[max(0, a - 2):b + 2].any():
            line[a:b] = True
    return line


def _underline(grey: npt.NDArray[np.int16], word: Word) -> int | None:
    """The row of ``word``'s underline, or None."""
    h, w = grey.shape
    left, top, ww, wh = word.box
    inset = min(round(BOX_SLACK * wh), ww // 8)
    left, right = max(0, left + inset), min(w, left + ww - inset)
    if right - left < 4 or top + wh + UNDER_BOX + 3 > h:
        return None
    area = grey[max(0, top):top + wh + UNDER_BOX + 3, left:right]
    ground = np.median(area)
    marks = np.abs(area - ground) >= INK_CONTRAST // 2
    full = marks.mean(axis=1)
    for i in range(len(full) - 3, max(2, math.ceil(UNDERLINE_FROM * wh) - 1), -1):
        if full[i + 1] >= UNDERLINE_ALONE or full[i + 2] >= UNDERLINE_ALONE:
            continue
        first = i  # the line's top row: one or two rows thick
        while first > i - UNDERLINE_ROWS + 1 and full[first - 1] >= UNDERLINE_ALONE:
            first -= 1
        if full[first - 1] < UNDERLINE_ALONE \
                and _line(marks, i, max(2, wh // 3)).mean() >= UNDERLINE_COVER:
            return max(0, top) + i
    return None


def _parted(grey: npt.NDArray[np.int16], row: int, left: int, right: int,
            height: int) -> bool:
    """Whether the underline at ``row`` has a gap between ``left`` and ``right`` (two
    words): a pixel of the ground left once the gaps a descender leaves are closed (the
    descender may stand just outside, so a few pixels around are looked at too)."""
    pad = 3
    x0, x1 = max(0, left - pad), min(grey.shape[1], right + pad)
    around = grey[max(0, row - pad):row + pad, x0:x1]
    top = row - max(0, row - pad)
    if around.shape[0] < top + 3:  # the screen's foot: no row under the line to look at
        return False
    marks = np.abs(around - np.median(around[0])) >= INK_CONTRAST // 2
    line = _line(marks, top, max(2, height // 3))
    return not bool(line[left - x0:right - x0].all())


def split_at_underlines(image: Image.Image, words: Sequence[Word]) -> list[Word]:
    """``words`` with a line cut between two words that are each underlined, by two
    underlines with a gap between them: two links one space apart ("Répondre Archiver"),
    each its own control. One link of two words has one underline, the space included,
    and stays one phrase."""
    if not words:
        return []
    grey = np.asarray(image.convert("L"), dtype=np.int16)
    lines: dict[int, list[Word]] = {}
    for word in words:
        lines.setdefault(word.line, []).append(word)
    next_line = 1 + max(word.line for word in words)
    out: list[Word] = []
    for line in lines.values():
        line.sort(key=lambda word: word.box[0])
        rows = [_underline(grey, word) for word in line]
        current = line[0].line
        for i, word in enumerate(line):
            before, after = (rows[i - 1], rows[i]) if i else (None, None)
            if before is not None and after is not None and before == after:
                left = line[i - 1].box[0] + line[i - 1].box[2]
                if word.box[0] > left and _parted(grey, before, left, word.box[0],
                                                  word.box[3]):
                    current, next_line = next_line, next_line + 1
            out.append(replace(word, line=current))
    return out

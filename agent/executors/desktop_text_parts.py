"""Parts of the monitor read again apart, for the text method (agent/executors/
desktop_text.py): closer, inverted when light on dark, contrast stretched where ink was
left unread (docs/grounding.md, rules 9, 11, 12 and 14). Boxes come back in the whole
image's pixels.

Pure: the OCR reader is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from PIL import Image, ImageOps

from agent.grounding.closer import with_closer_reading
from agent.grounding.dimmed import Dimmed
from agent.grounding.ink import (
    INK_SCALE,
    covering,
    split_at_underlines,
    stretched,
    unread,
)
from agent.grounding.text import Word, candidates
from agent.screen.capture import Rect

ReadWords = Callable[[Image.Image], list[Word]]
"""An OCR reader: the words on an image, boxes in its pixels (agent/grounding/)."""
ReadMany = Callable[[Sequence[Image.Image]], list[list[Word]]]
"""The same for several images at once (the second looks' crops, read in parallel)."""
Part = tuple[Rect, float]
"""A box of the image and the scale it is read at."""


@dataclass(frozen=True, slots=True)
class PartReader:
    """Reads parts of one image with ``read`` (``read_many`` when several at once)."""

    read: ReadWords
    read_many: ReadMany | None = None

    def parts(self, image: Image.Image, parts: Sequence[Part], invert: bool = False,
              stretch: bool = False) -> list[list[Word]]:
        """The words of each part (inverted if ``invert``; its contrast stretched if
        ``stretch``), at once if the reader can."""
        if not parts:
            return []
        images = [_part(image, box, scale, invert, stretch) for box, scale in parts]
        readings = (self.read_many(images) if self.read_many is not None and len(images) > 1
                    else [self.read(one) for one in images])
        return [_in_image(words, box, scale) for words, (box, scale) in zip(readings, parts,
                                                                            strict=True)]

    def closer(self, image: Image.Image, parts: Sequence[Part], label: str,
               stretch: bool = False) -> list[list[Word]]:
        """Each part read again at its scale, and inverted if that did not find ``label``:
        the reading where the label scores best (light on dark text reads better
        inverted). All read at once, then the inverted ones at once."""
        plain = self.parts(image, parts, stretch=stretch)
        best = [max((c.score for c in candidates(words, label)), default=0.0)
                for words in plain]
        again = [i for i, score in enumerate(best) if score < 1.0]
        inverted = dict(zip(again, self.parts(image, [parts[i] for i in again], invert=True,
                                              stretch=stretch), strict=True))
        out = []
        for i, words in enumerate(plain):
            other = inverted.get(i)
            if other is not None and max((c.score for c in candidates(other, label)),
                                         default=0.0) > best[i]:
                words = other
            out.append(words)
        return out

    def unread(self, image: Image.Image, words: list[Word], hidden: list[Word], dim: Dimmed,
               label: str) -> tuple[list[Word], list[Word]]:
        """``words`` with the places of unread ink read apart (contrast stretched), then
        cut at links' underlines; and the words read there behind a dialog."""
        places = unread(image, covering([*words, *hidden]), dim.covers, words=words)
        parts = [(place, INK_SCALE) for place in places]
        behind: list[Word] = []
        for (place, _), place_words in zip(parts, self.closer(image, parts, label,
                                                              stretch=True), strict=True):
            words = with_closer_reading(words, place, dim.front(place_words))
            behind += dim.behind(place_words)
        return split_at_underlines(image, words), behind


def _part(image: Image.Image, box: Rect, scale: float, invert: bool = False,
          stretch: bool = False) -> Image.Image:
    left, top, w, h = box
    part = image.crop((left, top, left + w, top + h))
    if stretch:
        part = stretched(part)
    if invert:
        part = ImageOps.invert(part.convert("RGB"))
    if scale != 1.0:
        part = part.resize((round(w * scale), round(h * scale)), Image.Resampling.BICUBIC)
    return part


def _in_image(words: Sequence[Word], box: Rect, scale: float) -> list[Word]:
    """Words read on a part (:func:`_part`), in the whole image's pixels."""
    left, top = box[0], box[1]
    return [replace(word, box=(left + round(word.box[0] / scale), top + round(word.box[1] / scale),
                               max(1, round(word.box[2] / scale)),
                               max(1, round(word.box[3] / scale))))
            for word in words]

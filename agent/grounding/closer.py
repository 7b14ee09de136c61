"""Read closer: where to read the screen again when a label is not found, and the words
that reading gives back in place of the first (docs/grounding.md, "Read closer").

Pure: words and candidates in, the crops to read again (or the words merged) out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.grounding.text import Box, Candidate, Word, contains, rows, union

CLOSER_FROM = 0.4
CLOSER_SCALE = 2.0
MAX_CLOSER = 3
"""When the label is not found, the phrases of at most ``MAX_CLOSER`` candidates scoring
from ``CLOSER_FROM`` are read again alone at ``CLOSER_SCALE``, as they are and inverted
(:func:`read_closer`)."""


@dataclass(frozen=True, slots=True)
class Closer:
    """A phrase read again alone (``crop``, at ``scale``, also inverted): the label was
    nearly read there (``read_as``)."""

    read_as: str
    crop: Box
    scale: float


def read_closer(words: Sequence[Word], found: Sequence[Candidate], min_score: float,
                size: tuple[int, int], cap: int = MAX_CLOSER) -> list[Closer]:
    """Where to read again when the label is not found: the phrases of the best
    candidates scoring ``CLOSER_FROM`` to ``min_score`` (a word read in pieces,
    "Docume", "R ercher"; a line of white on red read with words lost). Each crop holds
    its whole phrase and a little around it (docs/grounding.md, "Read closer")."""
    out: list[Closer] = []
    by_line = rows(words)
    for c in found:
        if len(out) >= cap:
            break
        if not CLOSER_FROM <= c.score < min_score:
            continue
        phrase = next((p for p in by_line if any(contains(w.box, c.centre, 0) for w in p)),
                      None)
        left, top, w, h = union(phrase) if phrase else c.box
        th = c.box[3]
        crop_left, crop_top = max(0, int(left - 2 * th)), max(0, int(top - 0.6 * th))
        crop_right = min(size[0], int(left + w + 2 * th) + 1)
        crop_bottom = min(size[1], int(top + h + 0.6 * th) + 1)
        box = (crop_left, crop_top, crop_right - crop_left, crop_bottom - crop_top)
        if box[2] >= 8 and box[3] >= 8 and not any(o.crop == box for o in out):
            out.append(Closer(c.text, box, CLOSER_SCALE))
    return out


def with_closer_reading(words: Sequence[Word], crop: Box, again: Sequence[Word]) -> list[Word]:
    """``words`` with those whose centre is in ``crop`` replaced by ``again`` (the crop
    read again, in the same pixels, on lines of their own)."""
    line0 = 1 + max((w.line for w in words), default=-1)
    kept = [w for w in words
            if not contains(crop, (w.box[0] + w.box[2] / 2, w.box[1] + w.box[3] / 2), 0)]
    return kept + [Word(w.text, w.conf, w.box, line0 + w.line) for w in again]

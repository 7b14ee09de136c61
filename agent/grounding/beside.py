"""The text beside a label: the value a form shows to the right of, or under, its label
("N° de séjour   2026-000123"), among the words an OCR engine read.

Pure: words in, the value or why not out (docs/protocol.md, "Outputs").

1. The label is found as the text method finds a control's (agent/grounding/text.py): every
   run of words of a row that reads like it, one per place. More than one place within
   ``margin`` of the best: which value is meant cannot be told, nothing is read.
2. ``right``: the first phrase (words cut at gaps wider than a space, ``PHRASE_GAP``) on
   the label's row after it, however far: a form's value column. ``below``: the phrase of
   the nearest row under the label that overlaps it horizontally.
3. Words that are punctuation only (the label's colon) are not part of a value.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from agent.grounding.text import (
    DEFAULT_MARGIN,
    DEFAULT_MIN_SCORE,
    PHRASE_GAP,
    Box,
    Candidate,
    Word,
    normalise,
    overlap,
    runs,
    seen,
)


@dataclass(frozen=True, slots=True)
class Beside:
    """``value`` read beside the label, or ``error`` saying why not."""

    value: str | None
    label: Candidate | None = None
    error: str | None = None


def places(words: Sequence[Word], label: str, min_score: float) -> list[Candidate]:
    """The places that read like ``label``, best first, one per place (overlapping
    readings of one place are one)."""
    kept: list[Candidate] = []
    for c in sorted(runs(words, label, min_score), key=lambda c: (-c.score, -c.box[2])):
        if not any(overlap(c.box, k.box) for k in kept):
            kept.append(c)
    return kept


def value_beside(words: Sequence[Word], label: str, direction: str = "right",
                 min_score: float = DEFAULT_MIN_SCORE,
                 margin: float = DEFAULT_MARGIN) -> Beside:
    """The value beside ``label`` (module docstring)."""
    found = places(words, label, min_score)
    if not found:
        return Beside(None, error=f"the label {label!r} is not read on the screen")
    best = found[0]
    rivals = [c for c in found if c.score >= best.score - margin]
    if len(rivals) > 1:
        return Beside(None, error=f"the label {label!r} is read at {len(rivals)} places: "
                                  + seen(rivals))
    kept = [w for w in words if normalise(w.text)]
    value = (_right if direction == "right" else _below)(kept, best.box)
    if not value:
        return Beside(None, best, f"nothing is read {_WHERE[direction]} the label {label!r}")
    return Beside(" ".join(w.text for w in value), best)


_WHERE = {"right": "to the right of", "below": "under"}


def _middle(box: Box) -> float:
    return box[1] + box[3] / 2


def _same_row(a: Box, b: Box) -> bool:
    return abs(_middle(a) - _middle(b)) <= max(a[3], b[3]) / 2


def _phrase(row: list[Word], first: Word) -> list[Word]:
    """The words of ``row`` (left to right) from ``first`` to the first gap wider than a
    space."""
    heights = sorted(w.box[3] for w in row)
    gap = PHRASE_GAP * heights[len(heights) // 2]
    out = [first]
    for prev, word in itertools.pairwise(row[row.index(first):]):
        if word.box[0] - (prev.box[0] + prev.box[2]) > gap:
            break
        out.append(word)
    return out


def _right(words: list[Word], label: Box) -> list[Word]:
    end = label[0] + label[2]
    row = sorted((w for w in words if _same_row(w.box, label)
                  and w.box[0] >= end - label[3] / 4), key=lambda w: w.box[0])
    return _phrase(row, row[0]) if row else []


def _below(words: list[Word], label: Box) -> list[Word]:
    left, top, width, height = label
    under = [w for w in words if w.box[1] >= top + height - height / 4
             and w.box[0] < left + width and w.box[0] + w.box[2] > left]
    if not under:
        return []
    first = min(under, key=lambda w: (w.box[1], w.box[0]))
    row = sorted((w for w in words if _same_row(w.box, first.box)), key=lambda w: w.box[0])
    start = min((w for w in row if w in under), key=lambda w: w.box[0])
    # The phrase holding the first word under the label, from its own start.
    while True:
        i = row.index(start)
        if i == 0 or start.box[0] - (row[i - 1].box[0] + row[i - 1].box[2]) \
                > PHRASE_GAP * start.box[3]:
            break
        start = row[i - 1]
    return _phrase(row, start)

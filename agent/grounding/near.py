"""Which of several identical controls: the one on the row of another text.

A table has a "Détail" on every row; a person says which: the "Détail" on the row that
reads "Hémoglobine". ``target_spec.near_text`` names that text; the control chosen is
the one place read like the label whose row (a band as high as the taller of the two,
across the screen) holds a place read like ``near_text``, and it must be the only one
(docs/grounding.md, "Which row"). When no copy stands on that row, the text may head a
block (a card's title, a message's author line) with its control under it: the nearest
copy below, in its column, if it is nearer than the blocks' pitch allows for a copy of
the next block (:func:`under_heading`). Pure: candidates and words in, a decision out.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.grounding.text import (
    Candidate,
    Decision,
    Word,
    contains,
    overlap,
    rows,
    runs,
    seen,
)

ROW_BAND = 0.5
"""Two places are on one row when their middles are within this share of the taller's
height (a button's text and its row's cells share a middle line)."""


BLOCK_SHARE = 0.8
"""A control is under a heading when it is the nearest copy below it and closer to it than
this share of the distance to the nearest other copy (the blocks' pitch): were the own
block's copy misread, the next block's would be a pitch or more away, and not taken."""
COLUMN_SLACK = 3.0
"""A control under a heading, or the row of controls it stands in (a message's "Répondre
Archiver"), starts within this many text heights of the heading's left edge."""
LONE_BLOCK = 6.0
"""With no other copy to give the pitch, the control is at most this many of its text
heights under the heading."""


def under_heading(mark: Candidate, close: Sequence[Candidate],
                  words: Sequence[Word] = ()) -> Candidate | None:
    """The copy of the label in the block ``mark`` heads, or None (BLOCK_SHARE). A copy
    is in the heading's column when it, or the row of ``words`` it stands in, starts
    under the heading's left edge (``COLUMN_SLACK``)."""
    h = max(c.box[3] for c in close)
    lines = rows(words)
    column = [c for c in close if any(abs(left - mark.box[0]) <= COLUMN_SLACK * h
                                      for left in (c.box[0], _row_start(c, lines)))]
    below = sorted((c for c in column if c.box[1] > mark.box[1] + mark.box[3]),
                   key=lambda c: c.box[1])
    if not below:
        return None
    c = below[0]
    reach = c.centre[1] - mark.centre[1]
    others = [abs(o.centre[1] - c.centre[1]) for o in column if o is not c]
    pitch = min(others, default=0.0)
    if pitch <= 0:
        return c if reach <= LONE_BLOCK * h else None
    return c if reach < BLOCK_SHARE * pitch else None


def _row_start(c: Candidate, lines: Sequence[Sequence[Word]]) -> int:
    """The left edge of the row of words that holds ``c`` (its own, if none does)."""
    return min((line[0].box[0] for line in lines
                if any(contains(w.box, c.centre, 0) for w in line)), default=c.box[0])


def on_row(a: Candidate, b: Candidate) -> bool:
    return abs(a.centre[1] - b.centre[1]) <= ROW_BAND * max(a.box[3], b.box[3])


def by_row(found: Sequence[Candidate], words: Sequence[Word], label: str, near: str,
           min_score: float, margin: float) -> Decision:
    """The one place read like ``label`` on the row of a place read like ``near``; else
    ``target_not_found`` (none on such a row, or ``near`` not read) or
    ``ambiguous_target`` (more than one)."""
    ranked = tuple(sorted(found, key=lambda c: -c.score))
    contenders = [c for c in ranked if c.score >= min_score]
    if not contenders:
        return Decision(None, ranked, error="target_not_found",
                        detail=f"no text like {label!r} (score >= {min_score}); "
                               + seen(ranked))
    marks = _places([m for m in runs(words, near, min_score)
                     if not any(m.box == c.box for c in contenders)])
    if not marks:
        return Decision(None, ranked, error="target_not_found",
                        detail=f"{label!r} is read, but no text like {near!r}, whose row "
                               "says which")
    # Every place read like the label, down to the margin, may be the one on that row.
    close = [c for c in ranked if c.score >= contenders[0].score - margin]
    pairs = [(c, m) for c in close for m in marks if on_row(c, m)]
    if not pairs:
        # No copy on the row itself: the row's text may head a block (a card's title, a
        # message's author) with the control under it (module docstring).
        pairs = [(c, m) for m in marks if (c := under_heading(m, close, words)) is not None]
    chosen = list(dict.fromkeys(c for c, _ in pairs))
    if not chosen:
        return Decision(None, ranked, error="target_not_found",
                        detail=f"no {label!r} on the row of {near!r}: {label!r} "
                               f"{seen(contenders)}; {near!r} {seen(marks)}")
    if len(chosen) > 1 or len({m.box for _, m in pairs}) > 1:
        return Decision(None, ranked, error="ambiguous_target",
                        detail=f"{len(chosen)} places read like {label!r} on rows of "
                               f"{near!r}: {seen(chosen)}; {near!r} {seen(marks)}")
    if chosen[0].score < min_score:
        return Decision(None, ranked, error="ambiguous_target",
                        detail=f"on the row of {near!r}, {chosen[0].describe()}: too unlike "
                               f"{label!r}")
    return Decision(chosen[0], ranked, tie_broken_by=f"row of {near!r}")


def _places(marks: Sequence[Candidate]) -> list[Candidate]:
    """One mark a place: of marks that overlap (the same words read whole and in part,
    "Dr Bertrand" and its "Bertrand"), the best scoring."""
    out: list[Candidate] = []
    for m in sorted(marks, key=lambda m: -m.score):
        if not any(overlap(m.box, o.box) for o in out):
            out.append(m)
    return out

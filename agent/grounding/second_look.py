"""Second looks before a click: parts of the monitor read again where another copy of
the label may stand, or to see what the anchor image matched (docs/grounding.md, rules
6-8). Pure: where to read, and what a reading there means; the caller reads.

- Around the recorded position, when the chosen text is away from it: the OCR may have
  misread a twin still standing there (:func:`look_again_boxes`, :func:`twin_seen_again`).
- At every place of about the chosen text's size read unsurely or nearly like the label
  (:func:`near_misses`, :func:`near_miss_is_label`), at most ``MAX_NEAR_MISSES``.
- Where the anchor image matched on none of the places read like the label: a twin the
  OCR misread, or a look-alike of the recorded control with other text on it
  (:func:`anchor_place`, :func:`anchor_look_alike`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agent.grounding.text import (
    ITEM_GAP,
    NEAR,
    SEEN,
    SURE,
    Box,
    Candidate,
    Decision,
    Word,
    candidates,
    contains,
    normalise,
    other_word,
    overlap,
    phrases,
    seen,
    union,
)

LOOK_AGAIN = ((20.0, 5.0, 1.0), (13.0, 3.5, 1.5), (7.0, 2.2, 1.5))
"""What is read again around the recorded position: half width and half height in text
heights, and a scale. Several, because Tesseract reads a short word beside a button's
bevel in one crop and not in the next (an "OK" read "fe)" on the full screen)."""
NEAR_MISS_CONF = SURE
"""A word read with less confidence than this may be anything, the label included."""
NEAR_MISS_SIMILAR = 0.5
"""A word this similar to the label (but not a rival) may be the label misread."""
NEAR_MISS_HEIGHT = (0.6, 1.6)
NEAR_MISS_WIDTH = (0.3, 2.0)
"""A near miss has about the chosen text's size: its height and width over the chosen's."""
NEAR_MISS_CROP = (3.0, 1.2, 2.0)
"""A near miss is read again in a crop of this half width and half height (text heights,
and at least the chosen text's half width) around it, at this scale: alone in a tight
crop, the "OK" read "fe)" on the whole screen reads "OK" at every scale tried."""
MAX_NEAR_MISSES = 12
"""At most this many near misses are read again before a click; more and the step is
``ambiguous_target`` (docs/grounding.md, "Near misses": the cap is set from the set's
counts, and a screen past it is one the OCR read too badly to trust a single match)."""


def look_again_boxes(chosen: Candidate, recorded: tuple[float, float] | None,
                     size: tuple[int, int]) -> list[tuple[Box, float]]:
    """Where to read again, and at which scale, before acting on ``chosen`` away from the
    recorded position: the OCR may have misread a twin still standing there
    (docs/grounding.md). Empty: ``chosen`` is at the recorded position, or there is none."""
    if recorded is None:
        return []
    h = chosen.box[3]
    if math.dist(chosen.centre, recorded) <= NEAR * h:
        return []
    out = []
    for half_w_h, half_h_h, scale in LOOK_AGAIN:
        half_w, half_h = max(half_w_h * h, 60), max(half_h_h * h, 20)
        left, top = max(0, int(recorded[0] - half_w)), max(0, int(recorded[1] - half_h))
        right = min(size[0], int(recorded[0] + half_w))
        bottom = min(size[1], int(recorded[1] + half_h))
        if right - left >= 8 and bottom - top >= 8:
            out.append(((left, top, right - left, bottom - top), scale))
    return out


def twin_seen_again(chosen: Candidate, again: Sequence[Candidate], label: str,
                    min_score: float, weighed: Sequence[Candidate] = (),
                    where: str = "away from the recorded position, and also near that "
                                 "position") -> Decision | None:
    """``ambiguous_target`` if the second reading found the label somewhere ``chosen`` is
    not (``again`` in the same pixels as ``chosen``), else None. ``weighed``: rivals the
    whole reading found and the anchor image set aside; read again, one of them is not
    news (the second look is for a twin the OCR misread). ``where`` says which second
    reading it was."""
    pad = chosen.box[3] / 2
    twins = [c for c in again if c.score >= min_score
             and not contains(chosen.box, c.centre, pad)
             and not any(contains(w.box, c.centre, pad) for w in weighed)]
    if not twins:
        return None
    return Decision(None, (chosen, *twins), error="ambiguous_target",
                    detail=f"{label!r} was read at {chosen.describe()}, {where}: "
                           + seen(twins))


@dataclass(frozen=True, slots=True)
class NearMiss:
    """A place where another copy of the label may have been misread: ``spot`` (what was
    read there, ``read_as``), read again in ``crop`` at ``scale``."""

    spot: Box
    read_as: str
    crop: Box
    scale: float
    read_score: float = 0.0
    """How like the label it was read surely (another word, :func:`other_word`): read
    again, it is a copy only if it reads more like the label than that."""


def near_misses(words: Sequence[Word], found: Sequence[Candidate], chosen: Candidate,
                label: str, min_score: float, size: tuple[int, int]) -> list[NearMiss]:
    """Where to read again before acting on ``chosen``: the places of about its size that
    the OCR read unsurely (low confidence) or as something like the label (a candidate
    between ``NEAR_MISS_SIMILAR`` and ``min_score``), away from every place already read
    as the label. A short label misread ("OK" as "fe)") scores nothing, so only the
    reading's confidence and size tell that another copy may stand there
    (docs/grounding.md, "Near misses"). The crop holds the whole phrase around the spot:
    a crop cutting "Enregistrer sous…" would read "Enregistrer"."""
    # Another word read surely beside the label read exactly is no rival, but it is
    # read again like any near miss (docs/grounding.md, rule 4).
    others = [c for c in found if c.score >= min_score and other_word(chosen, c)]
    known = [c.box for c in found if c.score >= min_score and c not in others]
    _, _, cw, ch = chosen.box
    spots: list[tuple[Box, str, float]] = [(c.box, c.text, 0.0) for c in found
                                           if NEAR_MISS_SIMILAR <= c.score < min_score]
    spots += [(c.box, c.text, c.score) for c in others]
    by_line = phrases(words)
    target = len(_compact(label))
    for phrase in by_line:
        spots.extend((w.box, w.text, 0.0) for i, w in enumerate(phrase)
                     if w.conf < NEAR_MISS_CONF and could_be_label(phrase, i, target, min_score))
    out: list[NearMiss] = []
    for spot, text, read_score in spots:
        x, y, ww, wh = spot
        centre = (x + ww / 2, y + wh / 2)
        if any(contains(box, centre, ch / 2) for box in known):
            continue
        if not (NEAR_MISS_HEIGHT[0] * ch <= wh <= NEAR_MISS_HEIGHT[1] * ch
                and NEAR_MISS_WIDTH[0] * cw <= ww <= NEAR_MISS_WIDTH[1] * cw):
            continue
        phrase_box = next((union(p) for p in by_line
                           if any(contains(w.box, centre, 0) for w in p)), spot)
        left, top, pw, ph = phrase_box
        half_w = max(NEAR_MISS_CROP[0] * ch, cw / 2 + ch)
        half_h = NEAR_MISS_CROP[1] * max(ch, wh)
        crop_left = max(0, int(min(left - ch, centre[0] - half_w)))
        crop_top = max(0, int(min(top, centre[1] - half_h)))
        crop_right = min(size[0], int(max(left + pw + ch, centre[0] + half_w)) + 1)
        crop_bottom = min(size[1], int(max(top + ph, centre[1] + half_h)) + 1)
        if crop_right - crop_left >= 8 and crop_bottom - crop_top >= 8:
            out.append(NearMiss(spot, text, (crop_left, crop_top, crop_right - crop_left,
                                             crop_bottom - crop_top), NEAR_MISS_CROP[2],
                                    read_score))
    return out


def _compact(text: str) -> str:
    return normalise(text).replace(" ", "")


def could_be_label(phrase: Sequence[Word], i: int, target: int, min_score: float) -> bool:
    """Whether the unsure word ``phrase[i]``, were it the label (``target`` letters), could
    be a copy of it: it stands apart from its neighbours like an item (``ITEM_GAP``), or
    the label would cover enough of its phrase to score ``min_score``. An unsure word in
    the middle of a sentence is neither: read right, it would not be a rival (rule 3 of
    docs/grounding.md), so a dense page's many unsure words are not all read again."""
    word = phrase[i]
    h = word.box[3]
    before = phrase[i - 1] if i > 0 else None
    after = phrase[i + 1] if i + 1 < len(phrase) else None
    apart = (before is None or word.box[0] - (before.box[0] + before.box[2]) >= ITEM_GAP * h) \
        and (after is None or after.box[0] - (word.box[0] + word.box[2]) >= ITEM_GAP * h)
    if apart:
        return True
    total = sum(len(_compact(w.text)) for w in phrase) - len(_compact(word.text)) + target
    return target >= min_score * total


def too_many_near_misses(chosen: Candidate, misses: Sequence[NearMiss], label: str,
                         cap: int = MAX_NEAR_MISSES) -> Decision | None:
    """``ambiguous_target`` when more than ``cap`` places would have to be read again: an
    unchecked place may hold another copy, so no click rather than a partial check."""
    if len(misses) <= cap:
        return None
    shown = ", ".join(f"{m.read_as!r} at ({m.spot[0]},{m.spot[1]})" for m in misses[:SEEN])
    return Decision(None, (chosen,), error="ambiguous_target",
                    detail=f"{label!r} was read at {chosen.describe()}, but {len(misses)} "
                           f"places of its size were read unsurely or nearly like it (more "
                           f"than {cap} to read again), e.g. {shown}")


def near_miss_is_label(chosen: Candidate, miss: NearMiss, again: Sequence[Candidate],
                       label: str, min_score: float) -> Decision | None:
    """``ambiguous_target`` if the near miss, read again (``again``, in the same pixels),
    is the label (another word read surely: read more like the label than it was, or
    unsurely); else None."""
    x, y, w, h = miss.spot
    hits = [c for c in again if c.score >= min_score
            and (c.score > miss.read_score or c.conf < SURE)
            and contains(c.box, (x + w / 2, y + h / 2), h / 2)]
    if not hits:
        return None
    return Decision(None, (chosen, *hits), error="ambiguous_target",
                    detail=f"{label!r} was read at {chosen.describe()}, and also, read again "
                           f"closer, where {miss.read_as!r} was read unsurely: " + seen(hits))


ANCHOR_CENTRE = 0.25
"""The middle of the anchor's place, this share of its width and height in from each
side: where its control's text is. The anchor holds its control with a margin of the
surroundings, whose text is not the control's."""
FLAT_MIDDLE = 2.0
"""A middle whose grey levels spread less than this (standard deviation) is one flat
colour: no text there. On the set, matches on a window's blank edge had 0.0; a middle
holding a caption about 50."""


def anchor_middle(anchor: Box) -> Box:
    """The middle of the anchor's place (``ANCHOR_CENTRE``), where its text would be."""
    left, top, w, h = anchor
    return (round(left + ANCHOR_CENTRE * w), round(top + ANCHOR_CENTRE * h),
            max(1, round((1 - 2 * ANCHOR_CENTRE) * w)), max(1, round((1 - 2 * ANCHOR_CENTRE) * h)))


def anchor_place(anchor: Box, size: tuple[int, int]) -> tuple[Box, float]:
    """The crop and scale that read what the anchor image matched (its box, a little
    around it: the crop must not cut the control's text)."""
    left, top, w, h = anchor
    pad = max(4, h // 4)
    crop_left, crop_top = max(0, left - pad), max(0, top - pad)
    right, bottom = min(size[0], left + w + pad), min(size[1], top + h + pad)
    return (crop_left, crop_top, right - crop_left, bottom - crop_top), NEAR_MISS_CROP[2]


def anchor_look_alike(anchor: Box, again: Sequence[Word], label: str) -> str | None:
    """What the anchor's place reads as, when it is surely not the label: words over its
    middle all read with confidence, none of them nor any run of words there like the
    label (``again``: :func:`anchor_place` read, in the same pixels as ``anchor``). The
    anchor then matched a look-alike (another field's caption at another scale), not a
    copy of the control. None: it may be the label (read like it, read unsurely, or
    nothing read), so the anchor's disagreement stands. (A middle of one flat colour,
    :data:`FLAT_MIDDLE`, is a look-alike without reading: nothing is written there.)"""
    over = [word for word in again if overlap(word.box, anchor_middle(anchor))]
    if not over or any(word.conf < NEAR_MISS_CONF for word in over):
        return None
    if any(c.score >= NEAR_MISS_SIMILAR for c in candidates(again, label)):
        return None
    return " ".join(word.text for word in over)

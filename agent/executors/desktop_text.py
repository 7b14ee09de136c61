"""The text method of the desktop executor: a target named by its visible text, found on
the routed monitor's pixels, or not acted on at all (docs/grounding.md).

One whole reading of the monitor; when the label is not found, parts read again closer
(nearly read phrases, coloured bands) and a menu bar's items where the recording points;
the anchor image and the recorded position break ties; before a click, second looks
where another copy may stand (agent/grounding/second_look.py). Boxes are in the
capture's pixels until the answer, offset by the capture's origin into desktop pixels.

Pure: the capture and the OCR reader are passed in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from PIL import Image, ImageStat

from agent.executors.desktop_text_parts import Part, PartReader, ReadMany, ReadWords
from agent.grounding.anchor import (
    UNIQUE_MARGIN,
    AnchorError,
    Match,
    decode_anchor,
    find_anchor,
    score_near,
)
from agent.grounding.bands import coloured_bands, strips
from agent.grounding.closer import CLOSER_SCALE, read_closer, with_closer_reading
from agent.grounding.dimmed import Dimmed
from agent.grounding.items import item_by_place
from agent.grounding.near import by_row, on_row
from agent.grounding.second_look import (
    FLAT_MIDDLE,
    MAX_NEAR_MISSES,
    anchor_look_alike,
    anchor_middle,
    anchor_place,
    look_again_boxes,
    near_miss_is_label,
    near_misses,
    too_many_near_misses,
    twin_seen_again,
)
from agent.grounding.text import (
    DEFAULT_MARGIN,
    DEFAULT_MIN_SCORE,
    Box,
    Candidate,
    Decision,
    Word,
    candidates,
    decide,
    other_word,
    seen,
)
from agent.screen.capture import Rect
from messages.workflow import TargetSpec

OCR = "ocr"



@dataclass(frozen=True, slots=True)
class TextSettings:
    """How the text is matched (agent/grounding/text.py); ``read`` None: no OCR here,
    ``unavailable`` says why."""

    read: ReadWords | None
    min_score: float = DEFAULT_MIN_SCORE
    margin: float = DEFAULT_MARGIN
    unavailable: str = "no OCR engine on this agent"
    max_near_misses: int = MAX_NEAR_MISSES
    read_many: ReadMany | None = None


@dataclass(frozen=True, slots=True)
class Resolved:
    """A point found (``x, y`` absolute), or why not (``error``)."""

    x: int | None
    y: int | None
    method: str | None
    score: float | None
    elapsed_ms: float | None
    error: str | None = None
    detail: str | None = None
    box: Rect | None = None
    """Where the target was read (absolute ``x, y, w, h``), for the text method."""

    @property
    def found(self) -> bool:
        return self.x is not None and self.y is not None


@dataclass(slots=True)
class _Search:
    """What one search has read and decided so far, stage by stage (:func:`by_text`)."""

    label: str
    recorded: tuple[float, float] | None
    text: TextSettings
    reader: PartReader
    dim: Dimmed
    words: list[Word]
    """The monitor's words in front, with the parts read again since."""
    hidden: list[Word]
    """The words read behind a dialog (never a target, rival nor near miss)."""
    whole: list[Word]
    """The whole monitor's reading, before any part was read again."""
    found: list[Candidate] = field(default_factory=list)
    decision: Decision = field(default_factory=lambda: Decision(None, ()))
    notes: list[str] = field(default_factory=list)
    """What else the report says (an anchor set aside)."""

    def decide(self, anchor: Box | None = None) -> None:
        self.found = candidates(self.words, self.label)
        self.decision = decide(self.found, self.label, self.text.min_score, self.text.margin,
                               self.recorded, anchor)

    def unsettled(self) -> bool:
        """Not found, or found imperfectly, or beside another word set aside: more of the
        monitor is worth reading (a copy of the label may stand unread, light on a dark
        menu, while a tab's title reads it; docs/grounding.md, rule 4)."""
        chosen = self.decision.chosen
        return self.decision.error == "target_not_found" or _imperfect(self.decision) \
            or (chosen is not None and any(other_word(chosen, c) and c.score >= chosen.score
                                           - self.text.margin for c in self.found))


def by_text(spec: TargetSpec, label: str, image: Image.Image, origin: tuple[int, int],
            recorded: tuple[float, float] | None, scales: Sequence[float],
            anchor_min_score: float, text: TextSettings) -> Resolved:
    """The text method: read the words, find the label, break ties with the anchor and
    the recorded position, look again before a click (module docstring)."""
    start = time.perf_counter()

    def ms() -> float:
        return round((time.perf_counter() - start) * 1000, 1)

    if text.read is None:
        return Resolved(None, None, OCR, None, None, "target_not_found",
                        f"cannot read {label!r}: {text.unavailable}")
    try:
        search = _read_monitor(label, image, recorded, text, text.read)
        if search.unsettled():
            _read_more(search, image)
        _choose(search, spec, image, scales, anchor_min_score)
        if search.decision.chosen is not None:
            _look_again(search, spec, image)
    except AnchorError as exc:
        return Resolved(None, None, OCR, None, ms(), "invalid_target_spec", str(exc))
    except Exception as exc:  # an engine failure is a failed search, never a crash
        return _ocr_failed(exc, ms())
    return _answer(search, origin, ms())


def _read_monitor(label: str, image: Image.Image, recorded: tuple[float, float] | None,
                  text: TextSettings, read: ReadWords) -> _Search:
    """The whole monitor read once, and a first decision on its words."""
    words = read(image)
    # What a modal dialog's backdrop dims is never a target, a rival nor a near miss
    # (docs/grounding.md, "Behind a dialog").
    dim = Dimmed(image)
    front = dim.front(words)  # the same list as ``whole`` until a part is read again
    search = _Search(label, recorded, text, PartReader(read, text.read_many), dim, front,
                     dim.behind(words), front)
    search.decide()
    return search


def _read_more(s: _Search, image: Image.Image) -> None:
    """Parts of the monitor read again while the label is not found, or found imperfectly;
    the rest of the monitor's reading stands, so a copy elsewhere is still a rival."""
    # Nearly read somewhere (or read imperfectly, "Patient" for "Patients": the label
    # itself may be unread on a dark menu): that phrase read again alone, closer, as it is
    # and inverted (docs/grounding.md, "Read closer").
    closer = [(c.crop, c.scale) for c in read_closer(s.words, s.found, s.text.min_score,
                                                    image.size)]
    _with_parts(s, image, closer)
    if s.unsettled():
        # Light text on a coloured band (a warning banner) may not have been read at all,
        # nor a modal dialog's buttons beside the dimmed page: each band and dialog is read
        # apart (docs/grounding.md, "Coloured bands").
        parts = [st for d in s.dim.dialogs() for st in strips(image, d)]
        _with_parts(s, image, [(band, CLOSER_SCALE)
                               for band in [*parts, *coloured_bands(image)]])
    if s.unsettled():
        # Light grey links are not read at all on the whole monitor: the ink no word read
        # covers is read apart, its contrast stretched; two links one space apart are cut
        # at their underlines (docs/grounding.md, "Unread ink").
        s.words, more_hidden = s.reader.unread(image, s.words, s.hidden, s.dim, s.label)
        s.hidden += more_hidden
        s.decide()


def _with_parts(s: _Search, image: Image.Image, parts: list[Part]) -> None:
    """Each part read again closer replaces the monitor's words there; decided again."""
    for (crop, _), words in zip(parts, s.reader.closer(image, parts, s.label), strict=True):
        s.words = with_closer_reading(s.words, crop, s.dim.front(words))
        s.hidden += s.dim.behind(words)
    s.decide()


def _choose(s: _Search, spec: TargetSpec, image: Image.Image, scales: Sequence[float],
            anchor_min_score: float) -> None:
    """Among the places read alike, the one the row, the recording (a menu bar's item)
    or the anchor says; raises AnchorError for an anchor that cannot be matched at all."""
    if spec.near_text:
        # The row says which of several alike (docs/grounding.md, "Which row").
        s.decision = by_row(s.found, s.words, s.label, spec.near_text, s.text.min_score,
                            s.text.margin)
    elif s.decision.error == "target_not_found" and (s.recorded or spec.anchor_image_base64):
        _menu_item(s, spec, image, scales, anchor_min_score)
    elif s.decision.error != "target_not_found" and spec.anchor_image_base64:
        _by_anchor(s, spec.anchor_image_base64, image, scales, anchor_min_score)


def _menu_item(s: _Search, spec: TargetSpec, image: Image.Image, scales: Sequence[float],
               anchor_min_score: float) -> None:
    """One item of a row of items (a menu bar), where the recording points at it
    (docs/grounding.md, "Items of a menu bar")."""
    anchor_box = None
    if spec.anchor_image_base64:
        anchor_box = _anchor_match(spec.anchor_image_base64, image, scales, anchor_min_score,
                                   s.notes, s.dim)
    place = s.recorded if anchor_box is None else None
    item = item_by_place(s.words, s.label, s.text.min_score, s.text.margin, place, anchor_box)
    if item.error == "target_not_found" and s.words is not s.whole:
        # Read closer, a menu bar's titles may come out closer together than on the whole
        # monitor, one phrase again: its items as the whole reading set them, with the
        # rivals of both readings.
        item = item_by_place(s.whole, s.label, s.text.min_score, s.text.margin, place,
                             anchor_box, also=s.words)
    if item.chosen is not None or item.error == "ambiguous_target":
        s.decision = item


def _by_anchor(s: _Search, anchor_image_base64: str, image: Image.Image,
               scales: Sequence[float], anchor_min_score: float) -> None:
    """The anchor breaks ties, and must agree with the text: a twin the OCR misread is not
    a candidate, but the anchor may still find it (docs/grounding.md)."""
    anchor_box = _anchor_match(anchor_image_base64, image, scales, anchor_min_score, s.notes,
                               s.dim)
    if anchor_box is None:
        return
    s.decide(anchor_box)
    if s.decision.tie_broken_by == "anchor":
        # Among rows alike, the anchor's search may not have weighed every twin: it is
        # compared at each place read alike, and chooses only if it matches there clearly
        # best (docs/grounding.md, rule 5).
        s.decision = _anchor_beats_twins(s.decision, anchor_image_base64, image, anchor_box,
                                         s.text.margin)
    if s.decision.anchor_elsewhere:
        # A misread twin, or a look-alike with other text on it (another button, a caption
        # at another scale): what is written there says which (docs/grounding.md, "The
        # anchor must agree").
        there = _anchor_look_alike(s.reader, image, anchor_box, s.label)
        if there is not None:
            s.decide()
            left, top, w, h = anchor_box
            s.notes.append(f"the anchor image matched a look-alike at ({left},{top},"
                           f"{w}x{h}), where {there!r} is read")


def _look_again(s: _Search, spec: TargetSpec, image: Image.Image) -> None:
    """A second look where another copy may stand: around the recorded position, and at
    every word the OCR was unsure of that could be the label misread (docs/grounding.md,
    "A second look" and "Near misses")."""
    decision, label, text = s.decision, s.label, s.text
    chosen = decision.chosen
    assert chosen is not None
    # Rivals the anchor set aside are not news when read again there.
    weighed = [c for c in decision.candidates if c.score >= chosen.score - text.margin
               and c is not chosen] if decision.tie_broken_by == "anchor" else []
    again = look_again_boxes(chosen, s.recorded, image.size)
    misses = near_misses(s.words, s.found, chosen, label, text.min_score, image.size)
    if spec.near_text:  # the row chose: only a copy misread on that row is a rival
        again = []
        misses = [m for m in misses if on_row(chosen, Candidate(m.read_as, 0, 0, m.spot))]
    too_many = too_many_near_misses(chosen, misses, label, text.max_near_misses)
    if too_many is not None:  # no click whatever a second look would read
        s.decision = too_many
        return
    # All read at once (two Tesseracts take turns), then judged in order: the same decision
    # as reading one by one and stopping at the first twin.
    readings = [s.dim.front(r) for r in s.reader.parts(
        image, [*again, *((m.crop, m.scale) for m in misses)])]
    for near in readings[:len(again)]:
        twin = twin_seen_again(chosen, candidates(near, label), label, text.min_score,
                               weighed)
        if twin is not None:
            s.decision = twin
            return
    for miss, near in zip(misses, readings[len(again):], strict=True):
        twin = near_miss_is_label(chosen, miss, candidates(near, label), label,
                                  text.min_score)
        if twin is not None:
            s.decision = twin
            return


def _answer(s: _Search, origin: tuple[int, int], elapsed_ms: float) -> Resolved:
    """The point to click in desktop pixels, or why not, with what was read."""
    decision, label, notes = s.decision, s.label, s.notes
    best = decision.chosen or (decision.candidates[0] if decision.candidates else None)
    score = None if best is None else best.score
    if decision.chosen is None and decision.error == "target_not_found":
        behind = [c for c in candidates(s.hidden, label) if c.score >= s.text.min_score]
        if behind:
            notes.insert(0, f"{label!r} is read only behind a dialog (a dimmed region, "
                            f"not clickable): {seen(behind)}")
    if decision.chosen is None:
        return Resolved(None, None, OCR, score, elapsed_ms, decision.error,
                        "; ".join(filter(None, [decision.detail, *notes])) or None)
    left, top, w, h = decision.chosen.box
    cx, cy = decision.chosen.centre
    detail = "; ".join([f"read {decision.chosen.text!r}", *notes])
    if decision.tie_broken_by:
        detail += f"; the {decision.tie_broken_by} chose among the places read alike"
    return Resolved(origin[0] + round(cx), origin[1] + round(cy), OCR, score, elapsed_ms,
                    detail=detail, box=(origin[0] + left, origin[1] + top, w, h))


def _imperfect(decision: Decision) -> bool:
    """A choice read less than perfectly: the label itself may stand unread elsewhere."""
    return decision.chosen is not None and decision.chosen.score < 1.0


def _ocr_failed(exc: Exception, elapsed_ms: float) -> Resolved:
    return Resolved(None, None, OCR, None, elapsed_ms, "target_not_found",
                    f"the OCR failed: {type(exc).__name__}: {exc}"[:300])


def _anchor_match(anchor_image_base64: str, image: Image.Image, scales: Sequence[float],
                  min_score: float, notes: list[str], dim: Dimmed) -> Box | None:
    """Where the anchor image matches on ``image``, or None: no match, or a match that is
    not unique or behind a dialog (said in ``notes``: the anchor then chooses nothing,
    docs/grounding.md);
    raises AnchorError for an anchor that cannot be matched at all."""
    match = find_anchor(image, decode_anchor(anchor_image_base64), scales, min_score)
    if match.ambiguous:
        notes.append(ambiguous_anchor(match))
        return None
    box = (match.left, match.top, match.w, match.h)
    if match.found and dim.covers(box):  # its matching ignores brightness
        notes.append(f"the anchor image matches behind a dialog at ({match.left},"
                     f"{match.top},{match.w}x{match.h}): not clickable")
        return None
    return box if match.found else None


def _anchor_beats_twins(decision: Decision, anchor_image_base64: str, image: Image.Image,
                        anchor: Box, margin: float) -> Decision:
    """``decision`` (the anchor chose) if the anchor matches at the chosen place better,
    by ``UNIQUE_MARGIN``, than at every other place read alike (the anchor set where it
    would stand over each, as it stands over the chosen one); else ``ambiguous_target``."""
    chosen = decision.chosen
    assert chosen is not None
    image_anchor = decode_anchor(anchor_image_base64)
    scale = anchor[2] / max(1, image_anchor.width)
    dx, dy = anchor[0] - chosen.box[0], anchor[1] - chosen.box[1]
    best = score_near(image, image_anchor, scale, anchor[0], anchor[1])
    twins = [c for c in decision.candidates
             if c is not chosen and c.score >= chosen.score - margin]
    for twin in twins:
        other = score_near(image, image_anchor, scale, twin.box[0] + dx, twin.box[1] + dy)
        if other >= best - UNIQUE_MARGIN:
            return Decision(None, decision.candidates, error="ambiguous_target",
                            detail=f"the anchor image matches {best:.2f} at "
                                   f"{chosen.describe()} and {other:.2f} at "
                                   f"{twin.describe()}, read alike: not one place")
    return decision


def ambiguous_anchor(match: Match) -> str:
    """What a report says of an anchor image that matches more than one place alike."""
    return (f"the anchor image matches {match.score:.2f} at ({match.left},{match.top},"
            f"{match.w}x{match.h}) and {match.second:.2f} elsewhere: not one place")


def _anchor_look_alike(reader: PartReader, image: Image.Image, anchor: Box,
                       label: str) -> str | None:
    """What the anchor's place holds when it is surely not the label (one flat colour
    where the text would be, or other words read surely); None: it may be a copy."""
    left, top, w, h = anchor_middle(anchor)
    middle = image.crop((left, top, left + w, top + h)).convert("L")
    if ImageStat.Stat(middle).stddev[0] < FLAT_MIDDLE:
        return "nothing: one flat colour"
    (words,) = reader.parts(image, [anchor_place(anchor, image.size)])
    return anchor_look_alike(anchor, words, label)

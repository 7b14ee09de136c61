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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from PIL import Image, ImageOps, ImageStat

from agent.grounding.anchor import (
    UNIQUE_MARGIN,
    AnchorError,
    Match,
    decode_anchor,
    find_anchor,
    score_near,
)
from agent.grounding.bands import coloured_bands, strips
from agent.grounding.dimmed import Dimmed
from agent.grounding.ink import INK_SCALE, split_at_underlines, stretched, unread
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
    CLOSER_SCALE,
    DEFAULT_MARGIN,
    DEFAULT_MIN_SCORE,
    Box,
    Candidate,
    Decision,
    Word,
    candidates,
    decide,
    read_closer,
    seen,
    with_closer_reading,
)
from agent.screen.capture import Rect
from messages.workflow import TargetSpec

OCR = "ocr"

ReadWords = Callable[[Image.Image], list[Word]]
"""An OCR reader: the words on an image, boxes in its pixels (agent/grounding/)."""
ReadMany = Callable[[Sequence[Image.Image]], list[list[Word]]]
"""The same for several images at once (the second looks' crops, read in parallel)."""


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


def by_text(spec: TargetSpec, label: str, image: Image.Image, origin: tuple[int, int],
            recorded: tuple[float, float] | None, scales: Sequence[float],
            anchor_min_score: float, text: TextSettings) -> Resolved:
    """The text method: read the words, find the label, break ties with the anchor and
    the recorded position (module docstring)."""
    start = time.perf_counter()

    def ms() -> float:
        return round((time.perf_counter() - start) * 1000, 1)

    if text.read is None:
        return Resolved(None, None, OCR, None, None, "target_not_found",
                        f"cannot read {label!r}: {text.unavailable}")
    try:
        words = text.read(image)
    except Exception as exc:  # an engine failure is a failed search, never a crash
        return _ocr_failed(exc, ms())
    # What a modal dialog's backdrop dims is never a target, a rival nor a near miss
    # (docs/grounding.md, "Behind a dialog").
    dim = Dimmed(image)
    hidden, words = dim.behind(words), dim.front(words)
    whole = words  # the whole monitor's reading, before any part is read again
    notes: list[str] = []  # what else the report says (an anchor set aside)
    found = candidates(words, label)
    decision = decide(found, label, text.min_score, text.margin, recorded)
    if decision.error == "target_not_found" or _imperfect(decision):
        # Nearly read somewhere (or read imperfectly, "Patient" for "Patients": the label
        # itself may be unread on a dark menu): that phrase read again alone, closer, as
        # it is and inverted (light on dark); the rest of the monitor's reading stands, so
        # a copy elsewhere is still a rival (docs/grounding.md, "Read closer").
        try:
            closer = [(c.crop, c.scale) for c in read_closer(words, found, text.min_score,
                                                            image.size)]
            for (crop, _), closer_words in zip(closer, _closer_words(text, image, closer,
                                                                     label), strict=True):
                words = with_closer_reading(words, crop, dim.front(closer_words))
                hidden += dim.behind(closer_words)
            found = candidates(words, label)
            decision = decide(found, label, text.min_score, text.margin, recorded)
            if decision.error == "target_not_found" or _imperfect(decision):
                # Light text on a coloured band (a warning banner) may not have been read
                # at all, nor a modal dialog's buttons beside the dimmed page: each band
                # and dialog is read apart (docs/grounding.md, "Coloured bands").
                parts = [s for d in dim.dialogs() for s in strips(image, d)]
                bands = [(band, CLOSER_SCALE) for band in [*parts, *coloured_bands(image)]]
                for (band, _), band_words in zip(bands, _closer_words(text, image, bands,
                                                                      label), strict=True):
                    words = with_closer_reading(words, band, dim.front(band_words))
                    hidden += dim.behind(band_words)
                found = candidates(words, label)
                decision = decide(found, label, text.min_score, text.margin, recorded)
            if decision.error == "target_not_found" or _imperfect(decision):
                # Light grey links are not read at all on the whole monitor: the ink no
                # word read covers is read apart, its contrast stretched; two links one
                # space apart are cut at their underlines (docs/grounding.md, "Unread
                # ink").
                words, more_hidden = _read_unread(text, image, words, hidden, dim, label)
                hidden += more_hidden
                found = candidates(words, label)
                decision = decide(found, label, text.min_score, text.margin, recorded)
        except Exception as exc:
            return _ocr_failed(exc, ms())
    if spec.near_text:
        # The row says which of several alike (docs/grounding.md, "Which row").
        decision = by_row(found, words, label, spec.near_text, text.min_score, text.margin)
    elif decision.error == "target_not_found" and (recorded or spec.anchor_image_base64):
        # One item of a row of items (a menu bar), where the recording points at it
        # (docs/grounding.md, "Items of a menu bar").
        anchor_box = None
        if spec.anchor_image_base64:
            try:
                anchor_box = _anchor_match(spec.anchor_image_base64, image, scales,
                                           anchor_min_score, notes, dim)
            except AnchorError as exc:
                return Resolved(None, None, OCR, None, ms(), "invalid_target_spec", str(exc))
        place = recorded if anchor_box is None else None
        item = item_by_place(words, label, text.min_score, text.margin, place, anchor_box)
        if item.error == "target_not_found" and words is not whole:
            # Read closer, a menu bar's titles may come out closer together than on the
            # whole monitor, one phrase again: its items as the whole reading set them,
            # with the rivals of both readings.
            item = item_by_place(whole, label, text.min_score, text.margin, place,
                                 anchor_box, also=words)
        if item.chosen is not None or item.error == "ambiguous_target":
            decision = item
    elif decision.error != "target_not_found" and spec.anchor_image_base64:
        # The anchor breaks ties, and must agree with the text: a twin the OCR misread is
        # not a candidate, but the anchor may still find it (docs/grounding.md).
        try:
            anchor_box = _anchor_match(spec.anchor_image_base64, image, scales,
                                       anchor_min_score, notes, dim)
        except AnchorError as exc:
            return Resolved(None, None, OCR, None, ms(), "invalid_target_spec", str(exc))
        if anchor_box is not None:
            decision = decide(found, label, text.min_score, text.margin, recorded,
                              anchor_box)
            if decision.tie_broken_by == "anchor":
                # Among rows alike, the anchor's search may not have weighed every twin:
                # it is compared at each place read alike, and chooses only if it
                # matches there clearly best (docs/grounding.md, rule 5).
                decision = _anchor_beats_twins(decision, spec.anchor_image_base64, image,
                                               anchor_box, text.margin)
            if decision.anchor_elsewhere:
                # A misread twin, or a look-alike with other text on it (another button,
                # a caption at another scale): what is written there says which
                # (docs/grounding.md, "The anchor must agree").
                try:
                    there = _anchor_look_alike(text, image, anchor_box, label)
                except Exception as exc:
                    return _ocr_failed(exc, ms())
                if there is not None:
                    decision = decide(found, label, text.min_score, text.margin, recorded)
                    left, top, w, h = anchor_box
                    notes.append(f"the anchor image matched a look-alike at ({left},{top},"
                                 f"{w}x{h}), where {there!r} is read")
    if decision.chosen is not None:
        # A second look where another copy may stand: around the recorded position, and
        # at every word the OCR was unsure of that could be the label misread
        # (docs/grounding.md, "A second look" and "Near misses").
        chosen = decision.chosen
        # Rivals the anchor set aside are not news when read again there.
        weighed = [c for c in decision.candidates if c.score >= chosen.score - text.margin
                   and c is not chosen] if decision.tie_broken_by == "anchor" else []
        again = look_again_boxes(chosen, recorded, image.size)
        misses = near_misses(words, found, chosen, label, text.min_score, image.size)
        if spec.near_text:  # the row chose: only a copy misread on that row is a rival
            again = []
            misses = [m for m in misses if on_row(chosen, Candidate(m.read_as, 0, 0, m.spot))]
        too_many = too_many_near_misses(chosen, misses, label, text.max_near_misses)
        if too_many is not None:  # no click whatever a second look would read
            decision, again, misses = too_many, [], []
        # All read at once (two Tesseracts take turns), then judged in order: the same
        # decision as reading one by one and stopping at the first twin.
        try:
            readings = [dim.front(r) for r in _read_parts(
                text, image, [*again, *((m.crop, m.scale) for m in misses)])]
        except Exception as exc:
            return _ocr_failed(exc, ms())
        for near in readings[:len(again)]:
            twin = twin_seen_again(chosen, candidates(near, label), label, text.min_score,
                                   weighed)
            if twin is not None:
                decision = twin
                break
        else:
            for miss, near in zip(misses, readings[len(again):], strict=True):
                twin = near_miss_is_label(chosen, miss, candidates(near, label), label,
                                          text.min_score)
                if twin is not None:
                    decision = twin
                    break
    best = decision.chosen or (decision.candidates[0] if decision.candidates else None)
    score = None if best is None else best.score
    if decision.chosen is None and decision.error == "target_not_found":
        behind = [c for c in candidates(hidden, label) if c.score >= text.min_score]
        if behind:
            notes.insert(0, f"{label!r} is read only behind a dialog (a dimmed region, "
                            f"not clickable): {seen(behind)}")
    if decision.chosen is None:
        return Resolved(None, None, OCR, score, ms(), decision.error,
                        "; ".join(filter(None, [decision.detail, *notes])) or None)
    left, top, w, h = decision.chosen.box
    cx, cy = decision.chosen.centre
    detail = "; ".join([f"read {decision.chosen.text!r}", *notes])
    if decision.tie_broken_by:
        detail += f"; the {decision.tie_broken_by} chose among the places read alike"
    return Resolved(origin[0] + round(cx), origin[1] + round(cy), OCR, score, ms(),
                    detail=detail, box=(origin[0] + left, origin[1] + top, w, h))


def _imperfect(decision: Decision) -> bool:
    """A choice read less than perfectly: the label itself may stand unread elsewhere."""
    return decision.chosen is not None and decision.chosen.score < 1.0


def _ocr_failed(exc: Exception, elapsed_ms: float) -> Resolved:
    return Resolved(None, None, OCR, None, elapsed_ms, "target_not_found",
                    f"the OCR failed: {type(exc).__name__}: {exc}"[:300])


def _read_unread(text: TextSettings, image: Image.Image, words: list[Word],
                 hidden: list[Word], dim: Dimmed, label: str) -> tuple[list[Word], list[Word]]:
    """``words`` with the places of unread ink read apart (contrast stretched), then cut
    at links' underlines; and the words read there behind a dialog."""
    places = unread(image, [w.box for w in (*words, *hidden)], dim.covers)
    parts = [(place, INK_SCALE) for place in places]
    behind: list[Word] = []
    for (place, _), place_words in zip(parts, _closer_words(text, image, parts, label,
                                                            stretch=True), strict=True):
        words = with_closer_reading(words, place, dim.front(place_words))
        behind += dim.behind(place_words)
    return split_at_underlines(image, words), behind


def _closer_words(text: TextSettings, image: Image.Image, parts: Sequence[tuple[Rect, float]],
                  label: str, stretch: bool = False) -> list[list[Word]]:
    """Each part read again at its scale, and inverted if that did not find ``label``: the
    reading where the label scores best (light on dark text reads better inverted). All
    read at once, then the inverted ones at once. ``stretch``: each part's contrast
    stretched first (agent/grounding/ink.py)."""
    plain = _read_parts(text, image, parts, stretch=stretch)
    best = [max((c.score for c in candidates(words, label)), default=0.0) for words in plain]
    again = [i for i, score in enumerate(best) if score < 1.0]
    inverted = dict(zip(again, _read_parts(text, image, [parts[i] for i in again],
                                           invert=True, stretch=stretch), strict=True))
    out = []
    for i, words in enumerate(plain):
        other = inverted.get(i)
        if other is not None and max((c.score for c in candidates(other, label)),
                                     default=0.0) > best[i]:
            words = other
        out.append(words)
    return out


def _read_parts(text: TextSettings, image: Image.Image, parts: Sequence[tuple[Rect, float]],
                invert: bool = False, stretch: bool = False) -> list[list[Word]]:
    """The words of each part (a box and a scale; inverted if ``invert``; its contrast
    stretched if ``stretch``), at once if the reader can."""
    if not parts:
        return []
    assert text.read is not None
    images = [_part(image, box, scale, invert, stretch) for box, scale in parts]
    readings = (text.read_many(images) if text.read_many is not None and len(images) > 1
                else [text.read(one) for one in images])
    return [_in_image(words, box, scale) for words, (box, scale) in zip(readings, parts,
                                                                        strict=True)]


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


def _anchor_look_alike(text: TextSettings, image: Image.Image, anchor: Box,
                       label: str) -> str | None:
    """What the anchor's place holds when it is surely not the label (one flat colour
    where the text would be, or other words read surely); None: it may be a copy."""
    left, top, w, h = anchor_middle(anchor)
    middle = image.crop((left, top, left + w, top + h)).convert("L")
    if ImageStat.Stat(middle).stddev[0] < FLAT_MIDDLE:
        return "nothing: one flat colour"
    (words,) = _read_parts(text, image, [anchor_place(anchor, image.size)])
    return anchor_look_alike(anchor, words, label)

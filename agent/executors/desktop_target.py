"""Where an action applies on the real desktop: which monitor, then which pixel.

Monitor (``target_area``), obeying the monitor router (docs/screens-and-pauses.md):

- the dispatch's ``monitor_resolution`` names a monitor (the recorded one, found again by
  geometry, or the focused one): that monitor;
- the router answered the composite and the action names no monitor: the composite;
- the router answered the composite because it could not know this agent's monitors (no
  heartbeat yet, a stale one, the router down) or there is no resolution: the agent applies
  the router's rule to its own monitors (:func:`messages.monitor.find_recorded`: the
  recorded geometry and name, never just the same number) and uses that monitor;
- the router answered the composite because the recorded monitor is gone
  (``recorded_monitor_unavailable``): the recorded geometry found again on the agent's own,
  fresher, monitors (re-plugged meanwhile); never another screen that now has its number;
- otherwise the action names a monitor nobody can find: the area is *refused*
  (``error="monitor_unavailable"``), nothing is done, and the replay pauses for a person.
  An ``invalid_index`` (no monitor can have it: a workflow error) stays on the composite, as
  the router said; so does an agent that cannot list its monitors at all.

Pixel (``resolve_point``): by the visible text
``target_spec.by_text`` read on that monitor's pixels (agent/grounding/), by template
matching of ``target_spec.anchor_image_base64`` on them, or ``x_pct / y_pct`` of that
monitor, in the order of ``target_spec.resolve_order`` (default: the text if there is one,
else the anchor if there is one, else the position; a missing anchor never falls back to a
blind position unless ``resolve_order`` asks for ``position`` after ``template``). A target
that has ``by_text`` is never acted on at a bare recorded position: there ``position``
stands for ``ocr``, and the recorded position (and the anchor) only break ties between two
places that read the same (docs/grounding.md). Local coordinates are offset by the
monitor's origin into absolute desktop coordinates, negative origins included.

Pure: the capture and the OCR reader are passed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from PIL import Image, ImageOps

from agent.anchor import AnchorError, decode_anchor, find_anchor
from agent.grounding.bands import coloured_bands
from agent.grounding.text import (
    CLOSER_SCALE,
    DEFAULT_MARGIN,
    DEFAULT_MIN_SCORE,
    MAX_NEAR_MISSES,
    Word,
    candidates,
    decide,
    item_by_place,
    look_again_boxes,
    near_miss_is_label,
    near_misses,
    read_closer,
    too_many_near_misses,
    twin_seen_again,
    with_closer_reading,
)
from agent.screen.capture import Rect
from messages.monitor import Monitor, MonitorResolution
from messages.workflow import INPUT_TYPES, Action, TargetSpec
from workflow.monitors import find_recorded

TEMPLATE = "template"
POSITION = "position"
OCR = "ocr"
ALIASES = {"template": TEMPLATE, "anchor": TEMPLATE, "template_match": TEMPLATE,
           "position": POSITION, "coords": POSITION, "xy": POSITION,
           "ocr": OCR, "text": OCR, "by_text": OCR}
"""``resolve_order`` names this agent can do; others (vlm, uia) are skipped here."""

ReadWords = Callable[[Image.Image], list[Word]]
"""An OCR reader: the words on an image, boxes in its pixels (agent/grounding/)."""


@dataclass(frozen=True, slots=True)
class TextSettings:
    """How the text is matched (agent/grounding/text.py); ``read`` None: no OCR here,
    ``unavailable`` says why."""

    read: ReadWords | None
    min_score: float = DEFAULT_MIN_SCORE
    margin: float = DEFAULT_MARGIN
    unavailable: str = "no OCR engine on this agent"
    max_near_misses: int = MAX_NEAR_MISSES


MONITOR_UNAVAILABLE = "monitor_unavailable"
ROUTER_DID_NOT_KNOW = frozenset({"no_heartbeat", "stale_heartbeat", "no_geometry",
                                 "router_unavailable", "router_refused"})
"""Composite answers given without this agent's monitors: the agent's own geometry decides."""


@dataclass(frozen=True, slots=True)
class Area:
    """The monitor (or composite, ``idx`` -1) an action runs on, in desktop pixels; or,
    with ``error``, why the action must not run at all (``rect`` is then not to be used)."""

    idx: int
    rect: Rect
    source: str
    reason: str | None = None
    error: str | None = None


def target_area(resolution: MonitorResolution | None, monitor_index: int | None,
                monitors: Sequence[Monitor], desktop: Rect,
                recorded: Monitor | None = None) -> Area:
    """The area of the module docstring's rule (``desktop`` = the composite; ``recorded``:
    the action's ``monitor_geometry``)."""
    if resolution is not None and resolution.idx >= 0 and resolution.w > 0 and resolution.h > 0:
        return Area(resolution.idx, (resolution.offset_x, resolution.offset_y,
                                     resolution.w, resolution.h), resolution.source,
                    resolution.reason)
    reason = resolution.reason if resolution is not None else None
    source = resolution.source if resolution is not None else "composite_fallback"
    if (monitor_index is None and recorded is None) or reason == "invalid_index" \
            or not monitors:
        return Area(-1, desktop, source, reason)
    router_knew = resolution is not None and reason not in ROUTER_DID_NOT_KNOW
    # The router refused the recorded monitor: only its geometry may find it again here,
    # never the index alone (after an unplug, that number is another screen).
    found = (None if router_knew and recorded is None
             else find_recorded(monitors, monitor_index, recorded))
    if found is not None:
        return Area(found[0].idx, found[0].rect, "action", found[1])
    what = (f"monitor {monitor_index}" if recorded is None
            else f"monitor {recorded.name or recorded.idx} {recorded.rect}")
    return Area(-1, desktop, source, reason or "recorded_monitor_unavailable",
                error=f"{MONITOR_UNAVAILABLE}: the action's {what} is not among this "
                      f"workstation's monitors {[m.rect for m in monitors]}")


def blind_elsewhere(action: Action, area: Area) -> str | None:
    """Why an input must not run on ``area``: the recorded monitor is gone and the router
    fell back to another screen (the focused one, docs/screens-and-pauses.md), where a recorded
    position would land blind on whatever is there (also as a fallback after an anchor). An anchor
    image alone is looked for there (it is found or not: never a blind click); keys and
    typing without a target go to the focus wherever it is."""
    if area.reason != "recorded_monitor_unavailable" or action.type not in INPUT_TYPES:
        return None
    spec = action.target_spec
    if spec is None or spec.x_pct is None or spec.y_pct is None \
            or POSITION not in resolution_order(spec):
        return None
    return (f"{MONITOR_UNAVAILABLE}: the action's recorded monitor is gone and its target is "
            f"a recorded position: not placed on monitor {area.idx} {area.rect} instead")


def point_at_pct(rect: Rect, x_pct: float, y_pct: float) -> tuple[int, int]:
    """The absolute pixel at ``(x_pct, y_pct)`` of ``rect`` (1.0 = its last pixel)."""
    x, y, w, h = rect
    return x + min(int(x_pct * w), w - 1), y + min(int(y_pct * h), h - 1)


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


def resolution_order(spec: TargetSpec) -> list[str]:
    """The methods to try, in order (module docstring)."""
    if spec.resolve_order:
        order = [ALIASES[m.casefold()] for m in spec.resolve_order if m.casefold() in ALIASES]
    elif spec.by_text:
        order = [OCR]
    elif spec.anchor_image_base64:
        order = [TEMPLATE]
    else:
        order = [POSITION]
    if spec.by_text:  # never a blind position for a target that names its text
        order = [OCR if m == POSITION else m for m in order]
    return list(dict.fromkeys(order))


def resolve_point(spec: TargetSpec | None, shot_image: Image.Image, shot_origin: tuple[int, int],
                  area: Rect, scales: Sequence[float], min_score: float,
                  text: TextSettings | None = None) -> Resolved:
    """Find the target on ``shot_image`` (the capture of ``area``, top-left at
    ``shot_origin``); absolute coordinates, or ``target_not_found`` / ``ambiguous_target``
    / ``invalid_target_spec``. ``min_score`` is the anchor's, ``text`` the OCR's."""
    if spec is None:
        return Resolved(None, None, None, None, None, "target_not_found",
                        "the action has no target_spec")
    tried: list[str] = []
    last: Resolved | None = None
    for method in resolution_order(spec):
        if method == OCR:
            if not spec.by_text:
                continue
            last = _by_text(spec, spec.by_text, shot_image, shot_origin, area, scales,
                            min_score, text or TextSettings(None))
            if last.found or last.error != "target_not_found":
                return last  # found, or ambiguous: a person decides, no other method
            tried.append(f"ocr: {last.detail}")
        elif method == TEMPLATE:
            if not spec.anchor_image_base64:
                continue
            try:
                anchor = decode_anchor(spec.anchor_image_base64)
                match = find_anchor(shot_image, anchor, scales, min_score)
            except AnchorError as exc:
                return Resolved(None, None, "template_match", None, None,
                                "invalid_target_spec", str(exc))
            if match.found:
                return Resolved(shot_origin[0] + round(match.x), shot_origin[1] + round(match.y),
                                "template_match", match.score, match.elapsed_ms)
            tried.append(f"template_match best score {match.score:.3f} < {min_score}")
            last = Resolved(None, None, "template_match", match.score, match.elapsed_ms,
                            "target_not_found", "; ".join(tried))
        elif spec.x_pct is not None and spec.y_pct is not None:
            x, y = point_at_pct(area, spec.x_pct, spec.y_pct)
            # A recorded position is not a measurement: no score.
            return Resolved(x, y, "position_fallback" if tried else "position", None, 0.0)
    if last is not None:
        return replace(last, detail="; ".join(tried)) if len(tried) > 1 else last
    unsupported = [m for m in spec.resolve_order if m.casefold() not in ALIASES]
    detail = "no anchor_image_base64 nor x_pct/y_pct to act on"
    if unsupported:
        detail += f" (this agent cannot resolve by {', '.join(unsupported)})"
    return Resolved(None, None, None, None, None, "target_not_found", detail)


def _by_text(spec: TargetSpec, label: str, image: Image.Image, origin: tuple[int, int],
             area: Rect, scales: Sequence[float], anchor_min_score: float,
             text: TextSettings) -> Resolved:
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
    whole = words  # the whole monitor's reading, before any part is read again
    recorded = None
    if spec.x_pct is not None and spec.y_pct is not None:
        x, y = point_at_pct(area, spec.x_pct, spec.y_pct)
        recorded = (x - origin[0], y - origin[1])
    found = candidates(words, label)
    decision = decide(found, label, text.min_score, text.margin, recorded)
    if decision.error == "target_not_found":
        # Nearly read somewhere: that phrase read again alone, closer, as it is and
        # inverted (light on dark); the rest of the monitor's reading stands, so a copy
        # elsewhere is still a rival (docs/grounding.md, "Read closer").
        try:
            for closer in read_closer(words, found, text.min_score, image.size):
                words = with_closer_reading(words, closer.crop, _closer_words(
                    text.read, image, closer.crop, closer.scale, label))
            found = candidates(words, label)
            decision = decide(found, label, text.min_score, text.margin, recorded)
            if decision.error == "target_not_found":
                # Light text on a coloured band (a warning banner) may not have been read
                # at all: each band is read apart (docs/grounding.md, "Coloured bands").
                for band in coloured_bands(image):
                    words = with_closer_reading(words, band, _closer_words(
                        text.read, image, band, CLOSER_SCALE, label))
                found = candidates(words, label)
                decision = decide(found, label, text.min_score, text.margin, recorded)
        except Exception as exc:
            return _ocr_failed(exc, ms())
    if decision.error == "target_not_found" and (recorded or spec.anchor_image_base64):
        # One item of a row of items (a menu bar), where the recording points at it
        # (docs/grounding.md, "Items of a menu bar").
        anchor_box = None
        if spec.anchor_image_base64:
            try:
                match = find_anchor(image, decode_anchor(spec.anchor_image_base64), scales,
                                    anchor_min_score)
            except AnchorError as exc:
                return Resolved(None, None, OCR, None, ms(), "invalid_target_spec", str(exc))
            anchor_box = (match.left, match.top, match.w, match.h) if match.found else None
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
            match = find_anchor(image, decode_anchor(spec.anchor_image_base64), scales,
                                anchor_min_score)
        except AnchorError as exc:
            return Resolved(None, None, OCR, None, ms(), "invalid_target_spec", str(exc))
        if match.found:
            decision = decide(found, label, text.min_score, text.margin, recorded,
                              (match.left, match.top, match.w, match.h))
    if decision.chosen is not None:
        # A second look where another copy may stand: around the recorded position, and
        # at every word the OCR was unsure of that could be the label misread
        # (docs/grounding.md, "A second look" and "Near misses").
        chosen = decision.chosen
        for box, scale in look_again_boxes(chosen, recorded, image.size):
            try:
                near = _read_part(text.read, image, box, scale)
            except Exception as exc:
                return _ocr_failed(exc, ms())
            twin = twin_seen_again(chosen, candidates(near, label), label, text.min_score)
            if twin is not None:
                decision = twin
                break
        misses = [] if decision.chosen is None else \
            near_misses(words, found, chosen, label, text.min_score, image.size)
        too_many = too_many_near_misses(chosen, misses, label, text.max_near_misses)
        if too_many is not None:
            decision, misses = too_many, []
        for miss in misses:
            try:
                near = _read_part(text.read, image, miss.crop, miss.scale)
            except Exception as exc:
                return _ocr_failed(exc, ms())
            twin = near_miss_is_label(chosen, miss, candidates(near, label), label,
                                      text.min_score)
            if twin is not None:
                decision = twin
                break
    best = decision.chosen or (decision.candidates[0] if decision.candidates else None)
    score = None if best is None else best.score
    if decision.chosen is None:
        return Resolved(None, None, OCR, score, ms(), decision.error, decision.detail)
    left, top, w, h = decision.chosen.box
    cx, cy = decision.chosen.centre
    detail = f"read {decision.chosen.text!r}"
    if decision.tie_broken_by:
        detail += f"; the {decision.tie_broken_by} chose among the places read alike"
    return Resolved(origin[0] + round(cx), origin[1] + round(cy), OCR, score, ms(),
                    detail=detail, box=(origin[0] + left, origin[1] + top, w, h))


def _ocr_failed(exc: Exception, elapsed_ms: float) -> Resolved:
    return Resolved(None, None, OCR, None, elapsed_ms, "target_not_found",
                    f"the OCR failed: {type(exc).__name__}: {exc}"[:300])


def _closer_words(read: ReadWords, image: Image.Image, box: Rect, scale: float,
                  label: str) -> list[Word]:
    """A part read again at ``scale``, and inverted if that did not find ``label``: the
    reading where the label scores best (light on dark text reads better inverted)."""
    plain = _read_part(read, image, box, scale)
    best = max((c.score for c in candidates(plain, label)), default=0.0)
    if best >= 1.0:
        return plain
    inverted = _read_part(read, image, box, scale, invert=True)
    other = max((c.score for c in candidates(inverted, label)), default=0.0)
    return inverted if other > best else plain


def _read_part(read: ReadWords, image: Image.Image, box: Rect, scale: float,
               invert: bool = False) -> list[Word]:
    """The words of a part of ``image``, read at ``scale`` (inverted if ``invert``), in
    ``image``'s pixels."""
    left, top, w, h = box
    part = image.crop((left, top, left + w, top + h))
    if invert:
        part = ImageOps.invert(part.convert("RGB"))
    if scale != 1.0:
        part = part.resize((round(w * scale), round(h * scale)), Image.Resampling.BICUBIC)
    return [replace(word, box=(left + round(word.box[0] / scale), top + round(word.box[1] / scale),
                               max(1, round(word.box[2] / scale)),
                               max(1, round(word.box[3] / scale))))
            for word in read(part)]

"""Where an action applies on the real desktop: which monitor, then which pixel.

Monitor (``target_area``): the dispatch's ``monitor_resolution`` (the monitor_router's
answer) if it names a monitor; else the agent's own monitor ``action.monitor_index`` (also
when the router could only answer the composite: it had no heartbeat yet); else the
composite (every monitor). Pixel (``resolve_point``): by template matching of
``target_spec.anchor_image_base64`` on that monitor's pixels only, or ``x_pct / y_pct`` of
that monitor, in the order of ``target_spec.resolve_order`` (default: the anchor if there
is one, else the position; a missing anchor never falls back to a blind position unless
``resolve_order`` asks for ``position`` after ``template``). Local coordinates are offset
by the monitor's origin into absolute desktop coordinates, negative origins included.

Pure: the capture is passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image

from agent.anchor import AnchorError, decode_anchor, find_anchor
from agent.screen.capture import Rect
from messages.monitor import Monitor, MonitorResolution
from messages.workflow import TargetSpec

TEMPLATE = "template"
POSITION = "position"
ALIASES = {"template": TEMPLATE, "anchor": TEMPLATE, "template_match": TEMPLATE,
           "position": POSITION, "coords": POSITION, "xy": POSITION}
"""``resolve_order`` names this agent can do; others (ocr, vlm, uia) are skipped here."""


@dataclass(frozen=True, slots=True)
class Area:
    """The monitor (or composite, ``idx`` -1) an action runs on, in desktop pixels."""

    idx: int
    rect: Rect
    source: str


def target_area(resolution: MonitorResolution | None, monitor_index: int | None,
                monitors: Sequence[Monitor], desktop: Rect) -> Area:
    """The area of the module docstring's rule (``desktop`` = the composite)."""
    if resolution is not None:
        if resolution.idx >= 0 and resolution.w > 0 and resolution.h > 0:
            return Area(resolution.idx, (resolution.offset_x, resolution.offset_y,
                                         resolution.w, resolution.h), resolution.source)
        if monitor_index is None:
            return Area(-1, desktop, resolution.source)
        # The router fell back to the composite without knowing our monitors (no heartbeat
        # yet, router down): the agent knows them, so the recorded monitor is used if it
        # exists here. An index no monitor has stays on the composite, as the router said.
    if monitor_index is not None:
        for m in monitors:
            if m.idx == monitor_index:
                return Area(m.idx, m.rect, "action")
    return Area(-1, desktop, "composite_fallback")


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

    @property
    def found(self) -> bool:
        return self.x is not None and self.y is not None


def resolution_order(spec: TargetSpec) -> list[str]:
    """The methods to try, in order (module docstring)."""
    if spec.resolve_order:
        order = [ALIASES[m.casefold()] for m in spec.resolve_order if m.casefold() in ALIASES]
        return list(dict.fromkeys(order))
    if spec.anchor_image_base64:
        return [TEMPLATE]
    return [POSITION]


def resolve_point(spec: TargetSpec | None, shot_image: Image.Image, shot_origin: tuple[int, int],
                  area: Rect, scales: Sequence[float], min_score: float) -> Resolved:
    """Find the target on ``shot_image`` (the capture of ``area``, top-left at
    ``shot_origin``); absolute coordinates, or ``target_not_found`` / ``invalid_target_spec``."""
    if spec is None:
        return Resolved(None, None, None, None, None, "target_not_found",
                        "the action has no target_spec")
    tried: list[str] = []
    last: Resolved | None = None
    for method in resolution_order(spec):
        if method == TEMPLATE:
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
        return last
    unsupported = [m for m in spec.resolve_order if m.casefold() not in ALIASES]
    detail = "no anchor_image_base64 nor x_pct/y_pct to act on"
    if unsupported:
        detail += f" (this agent cannot resolve by {', '.join(unsupported)})"
    return Resolved(None, None, None, None, None, "target_not_found", detail)

"""Where an action applies on the real desktop: which monitor, then which pixel.

Monitor (``target_area``), obeying the monitor router (docs/screens-and-pauses.md). A
dispatch that leaves the monitor to the agent (``agent_routes``) gets the router's rule
applied here, to this screen as it is at the moment of the action (:func:`routed_here`), and
then the same rule below:

- the dispatch's ``monitor_resolution`` names a monitor (the recorded one, found again by
  geometry, or the focused one): that monitor;
- the router answered the composite and the action names no monitor: the composite;
- the router answered the composite because it could not know this agent's monitors (no
  heartbeat yet, a stale one, the router down) or there is no resolution: the agent applies
  the router's rule to its own monitors (:func:`workflow.monitors.find_recorded`: the
  recorded geometry and name, never just the same number) and uses that monitor;
- the router answered the composite because the recorded monitor is gone
  (``recorded_monitor_unavailable``): the recorded geometry found again on the agent's own,
  fresher, monitors (re-plugged meanwhile); never another screen that now has its number;
- otherwise the action names a monitor nobody can find: the area is *refused*
  (``error="monitor_unavailable"``), nothing is done, and the replay pauses for a person.
  So is an ``invalid_index`` (no workstation has that monitor), and any named monitor on an
  agent that cannot list its monitors at all: the composite would put a position recorded
  on one screen in the middle of all of them. Only an action that names no monitor runs on
  the composite.

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

from collections.abc import Sequence
from dataclasses import dataclass, replace

from PIL import Image

from agent.executors.desktop_text import (
    OCR,
    Resolved,
    TextSettings,
    ambiguous_anchor,
    by_text,
)
from agent.grounding.anchor import AnchorError, decode_anchor, find_anchor
from agent.screen.capture import Rect
from messages.dispatch import DispatchAction
from messages.monitor import MAX_MONITORS, Monitor, MonitorResolution
from messages.workflow import INPUT_TYPES, Action, TargetSpec
from workflow.monitors import find_recorded, route

TEMPLATE = "template"
POSITION = "position"
ALIASES = {"template": TEMPLATE, "anchor": TEMPLATE, "template_match": TEMPLATE,
           "position": POSITION, "coords": POSITION, "xy": POSITION,
           "ocr": OCR, "text": OCR, "by_text": OCR}
"""``resolve_order`` names this agent can do; others (vlm, uia) are skipped here."""

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


def routed_here(dispatch: DispatchAction, monitors: Sequence[Monitor],
                focus: int | None) -> MonitorResolution | None:
    """The resolution to obey: the dispatcher's, or, when it leaves the monitor to the agent,
    the router's rule on ``monitors`` and the ``focus`` idx read now: fresher than any
    heartbeat the router could have had, so never a resolution older than the screen."""
    if not dispatch.agent_routes:
        return dispatch.monitor_resolution
    action = dispatch.action
    return route(monitors, focus, action.monitor_index, action.monitor_geometry).target


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
    if monitor_index is None and recorded is None:
        return Area(-1, desktop, source, reason)
    what = (f"monitor {monitor_index}" if recorded is None
            else f"monitor {recorded.name or recorded.idx} {recorded.rect}")
    if reason == "invalid_index":
        return Area(-1, desktop, source, reason,
                    error=f"{MONITOR_UNAVAILABLE}: the action's {what} cannot exist (a "
                          f"workstation has monitors 0..{MAX_MONITORS - 1})")
    if not monitors:
        return Area(-1, desktop, source, reason,
                    error=f"{MONITOR_UNAVAILABLE}: the action names its {what} and this "
                          "workstation's monitors cannot be listed")
    router_knew = resolution is not None and reason not in ROUTER_DID_NOT_KNOW
    # The router refused the recorded monitor: only its geometry may find it again here,
    # never the index alone (after an unplug, that number is another screen).
    found = (None if router_knew and recorded is None
             else find_recorded(monitors, monitor_index, recorded))
    if found is not None:
        return Area(found[0].idx, found[0].rect, "action", found[1])
    return Area(-1, desktop, source, reason or "recorded_monitor_unavailable",
                error=f"{MONITOR_UNAVAILABLE}: the action's {what} is not among this "
                      f"workstation's monitors {[m.rect for m in monitors]}")


def blind_elsewhere(action: Action, area: Area) -> str | None:
    """Why an input must not run on ``area``: the recorded monitor is gone and the router
    fell back to another screen (the focused one, docs/screens-and-pauses.md), where a recorded
    position would land blind on whatever is there (also as a fallback after an anchor). An anchor
    image alone is looked for there (it is found or not: never a blind click); keys and
    typing without a target go to the focus wherever it is. A read_text step's region is
    not read there either (a label is looked for, as an anchor)."""
    if area.reason != "recorded_monitor_unavailable":
        return None
    if action.type == "read_text" and "region" in action.parameters:
        # A region of another screen holds whatever is there: never a value to keep.
        return (f"{MONITOR_UNAVAILABLE}: the action's recorded monitor is gone and it reads "
                f"a region of it: not read on monitor {area.idx} {area.rect} instead")
    if action.type not in INPUT_TYPES:
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
            recorded = None
            if spec.x_pct is not None and spec.y_pct is not None:
                x, y = point_at_pct(area, spec.x_pct, spec.y_pct)
                recorded = (x - shot_origin[0], y - shot_origin[1])
            last = by_text(spec, spec.by_text, shot_image, shot_origin, recorded, scales,
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
            if match.ambiguous:  # a table's identical rows: the anchor cannot say which
                return Resolved(None, None, "template_match", match.score, match.elapsed_ms,
                                "ambiguous_target", ambiguous_anchor(match))
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

"""Monitor routing: which current screen is the one a step was recorded on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from messages.monitor import (
    COMPOSITE,
    MAX_MONITORS,
    Monitor,
    MonitorResolution,
    MonitorSource,
)


def find_recorded(monitors: Sequence[Monitor], index: int | None,
                  recorded: Monitor | None) -> tuple[Monitor, str | None] | None:
    """The current monitor that is the recorded one, and how it was recognised, or None.

    One rule for the monitor router and the agent (agent/executors/desktop_target.py): with
    a recorded geometry the same *physical* screen is looked for, never just the same
    number: same rectangle (and name), else same name and size (``moved``), else same
    rectangle (``renamed``); a different idx for it is ``renumbered``. Without one, the
    index."""
    if recorded is None:
        found = next((m for m in monitors if m.idx == index), None)
        return None if found is None else (found, None)

    def names_agree(m: Monitor) -> bool:
        return recorded.name is None or m.name is None or m.name == recorded.name

    tiers: list[tuple[list[Monitor], str | None]] = [
        ([m for m in monitors if m.rect == recorded.rect and names_agree(m)], None),
        ([m for m in monitors if recorded.name is not None and m.name == recorded.name
          and (m.w, m.h) == (recorded.w, recorded.h)], "moved"),
        ([m for m in monitors if m.rect == recorded.rect], "renamed"),
    ]
    for candidates, how in tiers:
        if candidates:
            best = min(candidates, key=lambda m: (m.idx != index, m.idx))
            if how is None and index is not None and best.idx != index:
                how = "renumbered"
            return best, how
    return None




@dataclass(frozen=True, slots=True)
class Route:
    """Where an action runs, by the monitor router's rule (:func:`route`): the resolution,
    and which of the rule's warnings it took (each is a bus event where it is applied)."""

    target: MonitorResolution
    invalid_index: bool = False
    """The action names a monitor no workstation has: the composite, and a refusal."""
    recorded_unavailable: bool = False
    """The action's recorded monitor is not among the current ones: the focused one (or the
    composite) stands in, where the agent still refuses a blind position."""


def _target(monitor: Monitor, source: MonitorSource, reason: str | None) -> MonitorResolution:
    return MonitorResolution(idx=monitor.idx, offset_x=monitor.x, offset_y=monitor.y,
                             w=monitor.w, h=monitor.h, source=source, reason=reason)


def _composite(reason: str) -> MonitorResolution:
    return COMPOSITE.model_copy(update={"reason": reason})


def route(monitors: Sequence[Monitor], focus: int | None, index: int | None,
          recorded: Monitor | None) -> Route:
    """The monitor router's rule for one action (``index``, ``recorded``: its
    ``monitor_index`` and ``monitor_geometry``) on a screen known now (``monitors``, the
    ``focus`` idx), applied alike by the router to an agent's last heartbeat and by the agent
    to its own screen at the moment of the action (docs/screens-and-pauses.md): no monitors
    → the composite; a monitor the action names, found again (:func:`find_recorded`); not
    found → the focused one; the composite when there is no focus."""
    if not monitors:
        return Route(_composite("no_geometry"))
    if index is not None and not 0 <= index < MAX_MONITORS:
        return Route(_composite("invalid_index"), invalid_index=True)
    reason: str | None = None
    if index is not None or recorded is not None:
        found = find_recorded(monitors, index, recorded)
        if found is not None:
            return Route(_target(found[0], "action", found[1]))
        reason = "recorded_monitor_unavailable"
    focused = next((m for m in monitors if m.idx == focus), None)
    unavailable = reason is not None
    if focused is not None:
        return Route(_target(focused, "focus", reason), recorded_unavailable=unavailable)
    return Route(_composite(reason or "no_focus"), recorded_unavailable=unavailable)

"""Monitor conversation: agent → monitor_router (heartbeats), dispatcher → monitor_router
(resolve). docs/screens-and-pauses.md.

How ``idx`` is numbered (one rule, on every agent, see :mod:`agent.screen.geometry`): the
primary monitor first, then the others left to right, then top to bottom. It never depends
on the order the OS enumerates monitors in, so the same physical layout always gives the
same indices; a recorded step may also carry its monitor's geometry and name
(``Action.monitor_geometry``) so that a changed layout is noticed instead of clicking on
another screen.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from messages.base import Message

MAX_MONITORS = 16
"""More monitors than any workstation has: a larger index or list is an input error."""

COORD_LIMIT = 1 << 20
"""Bound on any desktop coordinate or size (virtual desktops stay far below it)."""

MonitorSource = Literal["action", "focus", "composite_fallback"]


class Monitor(Message):
    """One monitor in virtual-desktop coordinates (x, y may be negative on Windows)."""

    idx: int = Field(ge=0, lt=MAX_MONITORS)
    x: int = Field(ge=-COORD_LIMIT, le=COORD_LIMIT)
    y: int = Field(ge=-COORD_LIMIT, le=COORD_LIMIT)
    w: int = Field(gt=0, le=COORD_LIMIT)
    h: int = Field(gt=0, le=COORD_LIMIT)
    primary: bool = False
    name: str | None = Field(None, max_length=128)

    @property
    def rect(self) -> tuple[int, int, int, int]:
        """``(x, y, w, h)``."""
        return self.x, self.y, self.w, self.h

    def contains(self, x: float, y: float) -> bool:
        return self.x <= x < self.x + self.w and self.y <= y < self.y + self.h


class MonitorResolution(Message, type_name="monitor.resolution"):
    """The spec's ``MonitorTarget``: the monitor an action runs on (idx -1 = the composite).

    The monitor_router answers :class:`ResolveMonitor` with it and the dispatcher attaches it
    to the dispatch as ``monitor_resolution``. Local coordinates found on that monitor are
    offset by ``(offset_x, offset_y)`` into absolute desktop coordinates. ``reason`` says why
    a fallback was taken (``recorded_monitor_unavailable``, ``invalid_index``,
    ``no_heartbeat``, ``stale_heartbeat``, ``no_geometry``, ``no_focus``,
    ``router_unavailable``), or how the recorded monitor was found (``moved``, ``renamed``).
    """

    idx: int = Field(ge=-1, lt=MAX_MONITORS)
    offset_x: int = Field(ge=-COORD_LIMIT, le=COORD_LIMIT)
    offset_y: int = Field(ge=-COORD_LIMIT, le=COORD_LIMIT)
    w: int = Field(ge=0, le=COORD_LIMIT)
    h: int = Field(ge=0, le=COORD_LIMIT)
    source: MonitorSource
    reason: str | None = Field(None, max_length=200)


COMPOSITE = MonitorResolution(idx=-1, offset_x=0, offset_y=0, w=0, h=0,
                              source="composite_fallback")
"""The whole virtual desktop, as before monitors were known (w = h = 0: the agent's size)."""


class AgentHeartbeat(Message, type_name="monitor.heartbeat"):
    """Agent → monitor_router, every few seconds and on a focus change; answered by Ack.

    ``monitors_geometry`` is ``[]`` when the agent cannot list its monitors (no screeninfo,
    no display): the router then resolves every action to the composite.
    """

    machine_id: str = Field(min_length=1, max_length=128)
    monitor_index: int | None = Field(None, ge=0, lt=MAX_MONITORS)
    monitors_geometry: list[Monitor] = Field(default_factory=list, max_length=MAX_MONITORS)
    active_window_title: str | None = Field(None, max_length=1024)
    at: float

    @model_validator(mode="after")
    def _indices_unique(self) -> AgentHeartbeat:
        indices = [m.idx for m in self.monitors_geometry]
        if len(set(indices)) != len(indices):
            raise ValueError(f"monitors_geometry: idx values must be unique, got {indices}")
        return self


class ResolveMonitor(Message, type_name="monitor.resolve"):
    """Dispatcher → monitor_router before a dispatch; answered by :class:`MonitorResolution`.

    Only what routing needs from the action (its anchor image stays home).
    """

    machine_id: str = Field(min_length=1, max_length=128)
    action_id: str = Field(min_length=1, max_length=200)
    action_type: str = Field(min_length=1, max_length=64)
    monitor_index: int | None = None
    monitor_geometry: Monitor | None = None
    replay_id: str | None = Field(None, max_length=128)
    session_id: str | None = Field(None, max_length=128)


class MonitorStatus(Message, type_name="monitor.status"):
    """Anyone → monitor_router: what it knows of one agent's screen, or of every agent."""

    machine_id: str | None = Field(None, max_length=128)


class AgentScreenInfo(Message):
    machine_id: str
    monitor_index: int | None
    monitors_geometry: list[Monitor]
    active_window_title: str | None
    at: float
    age_s: float
    """Seconds since the router received it (past the TTL it is not used)."""


class MonitorStatusReply(Message, type_name="monitor.status_reply"):
    agents: list[AgentScreenInfo]

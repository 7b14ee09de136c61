"""What an agent's heartbeat reports about its screen, from a pluggable probe.

The real desktop is probed through :mod:`agent.screen.geometry`; an executor that owns a
screen of its own (the simulated one) provides its own probe by having a ``screen_probe()``
method returning a :class:`ScreenProbe`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agent.screen import geometry
from messages.monitor import Monitor


@dataclass(frozen=True, slots=True)
class ScreenState:
    """One sample: the monitors, the focused one, the active window title."""

    monitors: list[Monitor] = field(default_factory=list)
    monitor_index: int | None = None
    active_window_title: str | None = None


class ScreenProbe(Protocol):
    """Reads the screen. ``monitors()`` may be slow (a few ms); ``focus()`` is polled."""

    def monitors(self) -> list[Monitor]:
        ...

    def focus(self, monitors: list[Monitor]) -> tuple[int | None, str | None]:
        """``(focused monitor idx, active window title)``."""
        ...


class DesktopProbe:
    """The real screen: screeninfo/mss monitors, the active window, else the pointer."""

    def monitors(self) -> list[Monitor]:
        return geometry.monitors_geometry()

    def focus(self, monitors: list[Monitor]) -> tuple[int | None, str | None]:
        title = geometry.active_window_title()
        if not monitors:
            return None, title
        index = geometry.focused_monitor(monitors, geometry.active_window_rect(),
                                         geometry.pointer_position())
        return index, title


def probe_for(executor: object) -> ScreenProbe:
    """The executor's own probe if it has one (``screen_probe()``), else the real desktop."""
    make = getattr(executor, "screen_probe", None)
    if callable(make):
        probe: ScreenProbe = make()
        return probe
    return DesktopProbe()

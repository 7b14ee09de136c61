"""A monitor as the OS reports it, before numbering: shared by the X11 and Win32 readers
and by :mod:`agent.screen.geometry`, which numbers them."""

from __future__ import annotations

from dataclasses import dataclass

Rect = tuple[int, int, int, int]
"""``(x, y, w, h)`` in virtual-desktop pixels."""


@dataclass(frozen=True, slots=True)
class RawMonitor:
    """A monitor as a source reports it, before numbering (``primary`` None = unknown)."""

    x: int
    y: int
    w: int
    h: int
    primary: bool | None = None
    name: str | None = None

    @property
    def rect(self) -> Rect:
        return self.x, self.y, self.w, self.h

"""Screen capture with mss: one monitor, any rectangle, or the composite (every monitor).

Every capture comes back with the desktop coordinates of its top-left pixel, so a point
found in the image (an anchor, a percentage of the monitor) becomes an absolute desktop
point by adding them. Rectangles are virtual-desktop pixels and may have negative origins
(Windows: a monitor left of or above the primary); they are cut to the desktop.

An ``mss.MSS`` handle belongs to the thread that made it (device contexts on Windows, the X
connection on Linux), so :class:`Screen` opens one per thread, on first use, and again if
``DISPLAY`` changed.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from PIL import Image

Rect = tuple[int, int, int, int]
"""``(x, y, w, h)`` in virtual-desktop pixels."""


class CaptureError(RuntimeError):
    """Nothing could be captured (no display, a rectangle off the desktop)."""


@dataclass(frozen=True, slots=True)
class Shot:
    """Captured pixels (RGB) and where their top-left pixel is on the desktop."""

    image: Image.Image
    x: int
    y: int

    @property
    def rect(self) -> Rect:
        return self.x, self.y, self.image.width, self.image.height


def intersect(a: Rect, b: Rect) -> Rect | None:
    """The overlap of two rectangles, or None."""
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[0] + a[2], b[0] + b[2]), min(a[1] + a[3], b[1] + b[3])
    if x1 <= x0 or y1 <= y0:
        return None
    return x0, y0, x1 - x0, y1 - y0


class Screen:
    """Captures the real screen. Safe to share between threads."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _sct(self) -> Any:
        # Reopened when DISPLAY changes (X11): a handle to a display that is gone fails.
        display = os.environ.get("DISPLAY")
        cached = getattr(self._local, "sct", None)
        if cached is not None and cached[0] == display:
            return cached[1]
        self.close()
        try:
            import mss

            sct = mss.MSS()
        except Exception as exc:  # no display, no library: one clear error
            raise CaptureError(f"cannot open the screen with mss: {exc}") from exc
        self._local.sct = (display, sct)
        return sct

    def desktop(self) -> Rect:
        """The composite: the bounding box of every monitor (mss ``monitors[0]``)."""
        m = self._sct().monitors[0]
        return int(m["left"]), int(m["top"]), int(m["width"]), int(m["height"])

    def grab(self, rect: Rect | None = None) -> Shot:
        """The pixels of ``rect`` cut to the desktop (None: the composite)."""
        desktop = self.desktop()
        area = desktop if rect is None else intersect(rect, desktop)
        if area is None:
            raise CaptureError(f"rectangle {rect} is outside the desktop {desktop}")
        x, y, w, h = area
        try:
            raw = self._sct().grab({"left": x, "top": y, "width": w, "height": h})
        except Exception as exc:
            raise CaptureError(f"capture of {area} failed: {exc}") from exc
        image = Image.frombytes("RGB", raw.size, raw.bgra, "raw", "BGRX")
        return Shot(image, x, y)

    def close(self) -> None:
        """Close this thread's handle (others close with their thread)."""
        cached = getattr(self._local, "sct", None)
        self._local.sct = None
        if cached is not None:
            try:
                cached[1].close()
            except Exception:
                pass  # the display is gone already


_default = Screen()


def capture(rect: Rect | None = None) -> Shot:
    """One capture of ``rect`` (None: every monitor), with its desktop offset."""
    return _default.grab(rect)


def capture_monitor(idx: int | None) -> Shot:
    """Monitor ``idx`` as numbered by :func:`agent.screen.geometry.monitors_geometry`
    (None: the composite); an index no monitor has raises :class:`CaptureError`."""
    from agent.screen.geometry import monitors_geometry

    if idx is None:
        return capture(None)
    monitors = monitors_geometry()
    for m in monitors:
        if m.idx == idx:
            return capture(m.rect)
    raise CaptureError(f"no monitor {idx} (monitors: {[m.rect for m in monitors]})")

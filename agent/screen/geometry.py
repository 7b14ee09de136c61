"""The workstation's monitors, which of them has the focus, and the active window's title.

``idx`` rule (the same on every agent, so a recorded ``monitor_index`` names the same screen
next time): the primary monitor first, then the others by ``(x, y)``: left to right, then top
to bottom. It never follows the OS enumeration order, which changes between boots, drivers
and replugs. Coordinates are virtual-desktop pixels: a monitor left of or above the primary
has a negative origin on Windows (X11 origins are never negative).

Sources: screeninfo (the spec's), mss as cross-check and fallback (it also knows the primary
and connector names screeninfo leaves out on X11), and on X11 the RandR 1.5 monitor names.
When nothing works (no display, library missing) the list is ``[]``, one warning is logged,
and the router falls back to the composite (docs/screens-and-pauses.md).

Windows DPI: :func:`ensure_dpi_awareness` makes the process per-monitor DPI aware so that
screeninfo, mss and input all speak physical pixels on mixed-DPI setups. It must run before
pyautogui is imported (pyautogui would set the weaker system-aware mode, and the mode can be
set once per process). Tested under Windows CPython in Wine at 96, 120 and 144 DPI
(tests/integration/test_win_desktop.py); see :mod:`agent.screen.win32`. When Windows refuses
it, :func:`dpi_reading` lets the executor refuse clicks on scaled monitors
(:mod:`agent.screen.dpi`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from loguru import logger

from agent.screen import win32, x11
from agent.screen.dpi import DpiReading
from agent.screen.raw_monitor import RawMonitor, Rect
from messages.monitor import MAX_MONITORS, Monitor

__all__ = [
    "Monitor",
    "RawMonitor",
    "active_window_rect",
    "active_window_title",
    "dpi_reading",
    "ensure_dpi_awareness",
    "focused_monitor",
    "foreground",
    "last_dpi_reading",
    "monitor_at",
    "monitors_geometry",
    "number_monitors",
    "pointer_position",
]

# Numbering (pure) ----------------------------------------------------------------------------

def number_monitors(raw: Iterable[RawMonitor]) -> list[Monitor]:
    """Deduplicate by rectangle, order by the ``idx`` rule, number from 0.

    Mirrored screens (same rectangle) are one monitor; degenerate sizes are dropped; at most
    :data:`MAX_MONITORS` are kept.
    """
    by_rect: dict[Rect, RawMonitor] = {}
    for m in raw:
        if m.w <= 0 or m.h <= 0:
            continue
        seen = by_rect.get(m.rect)
        if seen is not None:  # a mirror: keep what either copy knows
            primary = None if seen.primary is None and m.primary is None else \
                bool(seen.primary or m.primary)
            m = RawMonitor(m.x, m.y, m.w, m.h, primary, seen.name or m.name)
        by_rect[m.rect] = m
    ordered = sorted(by_rect.values(), key=lambda m: (not m.primary, m.x, m.y, m.w, m.h))
    return [Monitor(idx=i, x=m.x, y=m.y, w=m.w, h=m.h, primary=bool(m.primary),
                    name=(m.name or None) and m.name[:128])
            for i, m in enumerate(ordered[:MAX_MONITORS])]


def merge_sources(primary_source: Sequence[RawMonitor],
                  *others: Sequence[RawMonitor]) -> list[RawMonitor]:
    """``primary_source``'s monitors, with primary and name filled in from ``others`` by
    rectangle; the first non-empty source wins when ``primary_source`` is empty."""
    base = list(primary_source) or next((list(o) for o in others if o), [])
    merged = []
    for m in base:
        primary, name = m.primary, m.name
        for source in others:
            for o in source:
                if o.rect == m.rect:
                    primary = primary if primary is not None else o.primary
                    name = name or o.name
        merged.append(RawMonitor(m.x, m.y, m.w, m.h, primary, name))
    return merged


def monitor_at(monitors: Sequence[Monitor], x: float, y: float) -> Monitor | None:
    """The monitor containing the point, else the nearest one (a gap between screens)."""
    if not monitors:
        return None
    for m in monitors:
        if m.contains(x, y):
            return m

    def distance(m: Monitor) -> float:
        dx = max(m.x - x, 0.0, x - (m.x + m.w - 1))
        dy = max(m.y - y, 0.0, y - (m.y + m.h - 1))
        return dx * dx + dy * dy

    return min(monitors, key=lambda m: (distance(m), m.idx))


def focused_monitor(monitors: Sequence[Monitor], window_rect: Rect | None = None,
                    pointer: tuple[int, int] | None = None) -> int | None:
    """``idx`` of the monitor holding most of the active window, else the pointer's, or None.

    A window straddling two screens belongs to the one showing most of it (ties: the one
    holding its centre), as Windows decides for maximise and DPI.
    """
    if not monitors:
        return None
    if window_rect is not None and window_rect[2] > 0 and window_rect[3] > 0:
        wx, wy, ww, wh = window_rect
        cx, cy = wx + ww / 2, wy + wh / 2

        def overlap(m: Monitor) -> int:
            w = min(wx + ww, m.x + m.w) - max(wx, m.x)
            h = min(wy + wh, m.y + m.h) - max(wy, m.y)
            return max(w, 0) * max(h, 0)

        best = max(monitors, key=lambda m: (overlap(m), m.contains(cx, cy), -m.idx))
        if overlap(best) > 0:
            return best.idx
    if pointer is not None:
        found = monitor_at(monitors, *pointer)
        return None if found is None else found.idx
    return None


# Sources (I/O) -------------------------------------------------------------------------------

_warned: set[str] = set()


def _warn_once(what: str, detail: str) -> None:
    """One warning per distinct problem: a heartbeat every 2 s must not flood the log."""
    key = f"{what}: {detail}"
    if key not in _warned:
        _warned.add(key)
        logger.warning("{} (logged once)", key)


def _from_screeninfo() -> list[RawMonitor]:
    from screeninfo import get_monitors

    return [RawMonitor(int(m.x), int(m.y), int(m.width), int(m.height), m.is_primary,
                       m.name or None) for m in get_monitors()]


def _from_mss() -> list[RawMonitor]:
    import mss

    with mss.MSS() as sct:
        found: list[dict[str, Any]] = list(sct.monitors[1:])  # [0] is the composite
    return [RawMonitor(int(m["left"]), int(m["top"]), int(m["width"]), int(m["height"]),
                       m.get("is_primary"), m.get("output") or m.get("name") or None)
            for m in found]


def monitors_geometry() -> list[Monitor]:
    """The monitors, numbered by the ``idx`` rule; ``[]`` when they cannot be listed."""
    ensure_dpi_awareness()
    sources: dict[str, list[RawMonitor]] = {}
    errors: list[str] = []
    for name, read in (("screeninfo", _from_screeninfo), ("mss", _from_mss),
                       ("xrandr", x11.randr_monitors)):
        if name == "xrandr" and sys.platform == "win32":
            continue
        try:
            sources[name] = read()
        except Exception as exc:  # any library or display error: the composite still works
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            sources[name] = []
    screeninfo, mss_found = sources["screeninfo"], sources["mss"]
    if screeninfo and mss_found and {m.rect for m in screeninfo} != {m.rect for m in mss_found}:
        _warn_once("screeninfo and mss disagree, using screeninfo",
                   f"{[m.rect for m in screeninfo]} != {[m.rect for m in mss_found]}")
    monitors = number_monitors(merge_sources(screeninfo, mss_found, sources.get("xrandr", [])))
    dpi_reading()  # for lea-agent status: a monitor listing is when scales change
    if not monitors:
        _warn_once("cannot list the monitors, the composite will be used",
                   "; ".join(errors) or "no monitor reported")
    return monitors


def active_window_title() -> str | None:
    """The foreground window's title, or None (no display, no window, no window manager).

    X11: ``_NET_ACTIVE_WINDOW`` (needs a window manager), else the input focus walked up to
    its first named ancestor. Windows: GetForegroundWindow / GetWindowTextW.
    """
    try:
        return win32.active_window_title() if sys.platform == "win32" else \
            x11.active_window_title()
    except Exception as exc:
        _warn_once("cannot read the active window title", f"{type(exc).__name__}: {exc}")
        return None


NO_FOREGROUND_WINDOW = "no_foreground_window"
UNTITLED_FOREGROUND_WINDOW = "untitled_foreground_window"
FOREGROUND_UNREADABLE = "foreground_unreadable"


@dataclass(frozen=True, slots=True)
class Foreground:
    """The window in front: its title, or why the agent cannot tell (``blocker``)."""

    title: str | None
    blocker: str | None


def foreground() -> Foreground:
    """The foreground window's title, or the reason it cannot be known: no window in front
    (Windows: the UAC secure desktop, the lock screen; X11: no window manager and no focused
    named window), one without a readable title, or the call failed."""
    try:
        present, title = win32.foreground() if sys.platform == "win32" else x11.foreground()
    except Exception as exc:
        _warn_once("cannot read the active window", f"{type(exc).__name__}: {exc}")
        return Foreground(None, FOREGROUND_UNREADABLE)
    if not present:
        return Foreground(None, NO_FOREGROUND_WINDOW)
    return Foreground(title, None if title else UNTITLED_FOREGROUND_WINDOW)


def active_window_rect() -> Rect | None:
    """The foreground window's rectangle in desktop pixels, or None."""
    try:
        return win32.active_window_rect() if sys.platform == "win32" else \
            x11.active_window_rect()
    except Exception as exc:
        _warn_once("cannot read the active window rectangle", f"{type(exc).__name__}: {exc}")
        return None


def focus_rect() -> Rect | None:
    """Where keyboard input goes, in desktop pixels, or None: Windows the caret (else the
    focused control), X11 the input-focus window (x11.focus_rect says why no finer)."""
    try:
        return win32.focus_rect() if sys.platform == "win32" else x11.focus_rect()
    except Exception as exc:
        _warn_once("cannot read the focus rectangle", f"{type(exc).__name__}: {exc}")
        return None


def pointer_position() -> tuple[int, int] | None:
    """The mouse pointer in desktop pixels, or None."""
    try:
        return win32.pointer_position() if sys.platform == "win32" else \
            x11.pointer_position()
    except Exception as exc:
        _warn_once("cannot read the pointer position", f"{type(exc).__name__}: {exc}")
        return None


def ensure_dpi_awareness() -> None:
    """Windows: per-monitor DPI awareness, once, before any geometry or input (no-op else)."""
    if sys.platform == "win32":
        win32.ensure_dpi_awareness()


_last_dpi: list[DpiReading] = []


def dpi_reading() -> DpiReading | None:
    """Windows: the DPI awareness in effect and each monitor's scale (agent/screen/dpi.py),
    read now; None elsewhere, or when the reading fails (logged once)."""
    if sys.platform != "win32":
        return None
    try:
        reading = win32.dpi_reading()
    except Exception as exc:
        _warn_once("cannot read the display scaling", f"{type(exc).__name__}: {exc}")
        return None
    _last_dpi[:] = [reading]
    return reading


def last_dpi_reading() -> DpiReading | None:
    """The latest :func:`dpi_reading` (taken with each monitor listing), without reading."""
    return _last_dpi[0] if _last_dpi else None

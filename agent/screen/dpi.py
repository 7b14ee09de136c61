"""Display scaling on Windows: which pixels the agent's calls speak, and when it must not click.

Windows lets each monitor have its own scale (a laptop at 150 %, an external screen at
100 %). What a process sees depends on its DPI awareness (docs/windows-scaling.md gives the
Microsoft documentation behind each rule):

- **per-monitor aware**: every monitor rectangle, capture, cursor position and
  ``SetCursorPos`` is in physical pixels: what the agent captures is where it clicks, on
  every monitor, whatever their scales;
- **system aware**: the process works at the system DPI (the primary monitor's scale when
  the person signed in); on a monitor of another scale Windows virtualises its coordinates
  (multiplied by ``monitor DPI / system DPI``) and stretches its pixels;
- **unaware**: the same, at 96 DPI (100 %) on every monitor.

The agent asks for per-monitor awareness at start (agent/screen/win32.py). If Windows refused
(the awareness was already set: a compatibility setting, a manifest) and a monitor is scaled
for this process, the agent does not place any click: where the pointer would land differs
from what it captured, and it cannot tell by how much from its own coordinates alone
(:func:`input_refusal`). Pure: the readings are passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from fractions import Fraction

from agent.screen.raw_monitor import Rect

USER_DEFAULT_SCREEN_DPI = 96
"""100 % scaling (``USER_DEFAULT_SCREEN_DPI`` in winuser.h)."""


class Awareness(IntEnum):
    """``DPI_AWARENESS`` (GetAwarenessFromDpiAwarenessContext), also the values of
    ``PROCESS_DPI_AWARENESS`` (GetProcessDpiAwareness)."""

    UNAWARE = 0
    SYSTEM = 1
    PER_MONITOR = 2


NAMES = {Awareness.UNAWARE: "DPI unaware", Awareness.SYSTEM: "system DPI aware",
         Awareness.PER_MONITOR: "per-monitor DPI aware"}


@dataclass(frozen=True, slots=True)
class MonitorDpi:
    """One monitor: its rectangle in physical pixels and its effective DPI (GetDpiForMonitor
    ``MDT_EFFECTIVE_DPI`` read per-monitor aware), None when it cannot be read."""

    rect: Rect
    dpi: int | None


@dataclass(frozen=True, slots=True)
class DpiReading:
    """The process's awareness (None: unreadable), the system DPI (None: unknown), the
    monitors, and what the agent's request for per-monitor awareness got (``asked``)."""

    awareness: Awareness | None
    system_dpi: int | None
    monitors: tuple[MonitorDpi, ...]
    asked: str


def scale_percent(dpi: int) -> int:
    """The scale Windows' display settings show for ``dpi`` (96 → 100, 144 → 150)."""
    return round(dpi * 100 / USER_DEFAULT_SCREEN_DPI)


def process_dpi(awareness: Awareness, system_dpi: int | None) -> int | None:
    """The one DPI a process that is not per-monitor aware works at (None: per monitor, or
    the system DPI is unknown)."""
    if awareness == Awareness.UNAWARE:
        return USER_DEFAULT_SCREEN_DPI
    return system_dpi if awareness == Awareness.SYSTEM else None


def seen_dpi(awareness: Awareness, monitor_dpi: int, system_dpi: int) -> int:
    """What GetDpiForMonitor answers a process of ``awareness`` about a monitor of
    ``monitor_dpi`` (its documentation's table): only a per-monitor aware process is told the
    monitor's own DPI, which is why the agent reads it from a per-monitor aware thread."""
    if awareness == Awareness.PER_MONITOR:
        return monitor_dpi
    return system_dpi if awareness == Awareness.SYSTEM else USER_DEFAULT_SCREEN_DPI


def scale_factor(awareness: Awareness, monitor_dpi: int, system_dpi: int) -> Fraction:
    """Physical pixels per pixel of the process on that monitor: 1 when Windows scales
    nothing for it (DPI virtualisation applies to the other cases)."""
    own = process_dpi(awareness, system_dpi)
    return Fraction(1) if own is None else Fraction(monitor_dpi, own)


def seen_size(w: int, h: int, factor: Fraction) -> tuple[int, int]:
    """A monitor's physical size as a process virtualised by ``factor`` sees it (the
    3840x2160 screen at 200 % is 1920x1080 to a DPI-unaware process)."""
    return round(w / factor), round(h / factor)


def to_physical(offset_x: int, offset_y: int, factor: Fraction) -> tuple[int, int]:
    """A point given relative to a monitor's top-left corner in the process's pixels, in
    physical pixels from that corner: where a virtualised click really lands."""
    return round(offset_x * factor), round(offset_y * factor)


def input_refusal(reading: DpiReading) -> str | None:
    """Why no click may be placed (a sentence for the person), or None when the agent's
    pixels are the screen's on every monitor."""
    if reading.awareness is None:
        return ("the agent cannot read its DPI awareness, so it cannot tell whether Windows "
                "scales its clicks")
    if reading.awareness == Awareness.PER_MONITOR:
        return None
    name = NAMES[reading.awareness]
    own = process_dpi(reading.awareness, reading.system_dpi)
    why = f"Windows refused per-monitor DPI awareness ({reading.asked}) and the agent is {name}"
    if own is None:
        return f"{why}, at a system scale it cannot read"
    for m in reading.monitors:
        x, y, w, h = m.rect
        if m.dpi is None:
            return (f"{why}: the scale of the monitor {w}x{h} at ({x}, {y}) cannot be read, "
                    "so where a click lands cannot be known")
        if m.dpi != own:
            factor = Fraction(m.dpi, own)
            sw, sh = seen_size(w, h, factor)
            return (f"{why} at {scale_percent(own)} %: the monitor {w}x{h} at ({x}, {y}) is at "
                    f"{scale_percent(m.dpi)} %, which Windows scales for the agent (it sees "
                    f"{sw}x{sh}): a click would not land where the agent aims")
    return None


def describe(reading: DpiReading | None) -> str:
    """One line for ``lea-agent status``."""
    if reading is None:
        return "display scaling: not read (not Windows, or no real screen)"
    awareness = "unreadable" if reading.awareness is None else NAMES[reading.awareness]
    scales = ", ".join(
        f"{m.rect[2]}x{m.rect[3]} at ({m.rect[0]}, {m.rect[1]}) "
        + ("?" if m.dpi is None else f"{scale_percent(m.dpi)} %") for m in reading.monitors)
    refused = input_refusal(reading)
    return (f"display scaling: {awareness} ({reading.asked}); monitors: {scales or 'none'}"
            + ("" if refused is None else f"; CLICKS REFUSED: {refused}"))

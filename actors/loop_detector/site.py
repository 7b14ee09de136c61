"""Where an action acted, on the screenshot: the part of the screen its progress shows in.

The agent reports the point it clicked (``actual_position``), the foreground window and
where keyboard input went (``site``: the caret, else the focused control, else the focus
window) as fractions of the screenshot (messages/dispatch.py ``ActionSite``). From them:

- a click: a box around the point (a button's press, a check box, a counter beside it, a
  list row's highlight);
- typing at a point: the row of text through the point, across the window (a field's text
  starts at its left edge, wherever it was clicked), and the focus box;
- typing or a key without a point: where the replay last typed (forgotten at a click: the
  focus may have moved, to a dialog just opened), and the focus box;
- a scroll: a taller box around the point (the rows of the list move);
- a ``wait``: no site, it is an observation of the whole screen;
- after a click that moved the pointer: the spots under its previous and new positions,
  where its hover highlight comes and goes (``pointer_spots``).

Unknown (no point, no site): the whole screen is judged as before (screen_history.py).
Box sizes are fractions of the screenshot (docs/loop-detection.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from messages.loop import ObserveStep

Box = tuple[float, float, float, float]
"""``(x, y, w, h)`` as fractions of the screenshot."""

POINT_HALF: Final = (0.10, 0.04)
"""Half width and height of the box judged around a click."""
SCROLL_HALF: Final = (0.08, 0.10)
TEXT_HALF_H: Final = 0.03
"""Half height of the row of text judged for typing."""
POINTER_HALF: Final = (0.04, 0.03)
"""Half width and height of the spot under the pointer where its hover highlight shows:
the control the pointer is over (a toolbar button, a check box with its label)."""
SMALL_FOCUS: Final = 0.02
"""A focus box up to this fraction of the screen is a control or a caret (Win32); a larger
one is a whole window (X11), judged only when nothing finer is known."""


@dataclass(frozen=True, slots=True)
class Site:
    boxes: tuple[Box, ...]
    label: str
    """For people: ``click 0.103,0.345``, ``type (focus)``, ``wait``."""
    typed: Box | None = None
    """Where keyboard input went, remembered for the keys that follow."""


def _around(x: float, y: float, half: tuple[float, float]) -> Box:
    return (x - half[0], y - half[1], 2 * half[0], 2 * half[1])


def point_of(step: ObserveStep) -> tuple[float, float] | None:
    """The point the agent acted at (``actual_position``), if it reported one."""
    pos = step.actual_position or {}
    x, y = pos.get("x_pct"), pos.get("y_pct")
    return None if x is None or y is None else (float(x), float(y))


def pointer_spots(new: tuple[float, float], old: tuple[float, float]) -> tuple[Box, Box]:
    """The spots under the pointer's new and previous positions: where a hover highlight
    comes and goes when the pointer moves (screen_history.py, the pointer's trail)."""
    return _around(*new, POINTER_HALF), _around(*old, POINTER_HALF)


def site_of(step: ObserveStep, last_typed: Box | None) -> Site | None:
    """The site of a performed input; None if nothing tells where it acted."""
    point = point_of(step)
    window = step.site.window if step.site is not None else None
    focus = step.site.focus if step.site is not None else None
    kind = step.action_type
    where = "" if point is None else f" {point[0]:.3f},{point[1]:.3f}"
    if kind in ("click", "double_click", "right_click") and point is not None:
        return Site((_around(*point, POINT_HALF),), f"{kind}{where}")
    if kind == "scroll":
        if point is not None:
            return Site((_around(*point, SCROLL_HALF),), f"scroll{where}")
        return Site((window,), "scroll (window)") if window is not None else None
    if kind in ("type", "key_combo"):
        boxes: list[Box] = []
        typed: Box | None = None
        if point is not None:
            left, right = (window[0], window[0] + window[2]) if window else (0.0, 1.0)
            typed = (left, point[1] - TEXT_HALF_H, right - left, 2 * TEXT_HALF_H)
            boxes.append(typed)
        elif last_typed is not None:
            boxes.append(last_typed)
            typed = last_typed
        if focus is not None and (not boxes or focus[2] * focus[3] <= SMALL_FOCUS):
            boxes.append(focus)
            typed = typed or focus
        if not boxes and window is not None:
            boxes.append(window)
        if not boxes:
            return None
        return Site(tuple(boxes), f"{kind}{where or ' (focus)'}", typed)
    return None


def box_mask(boxes: tuple[Box, ...], shape: tuple[int, int]) -> npt.NDArray[np.bool_]:
    """The tiles of a ``shape`` grid covered by ``boxes``."""
    rows, cols = shape
    mask = np.zeros(shape, dtype=bool)
    for bx, by, bw, bh in boxes:
        c0, c1 = max(0, int(bx * cols)), min(cols, int(np.ceil((bx + bw) * cols)))
        r0, r1 = max(0, int(by * rows)), min(rows, int(np.ceil((by + bh) * rows)))
        if c1 > c0 and r1 > r0:
            mask[r0:r1, c0:c1] = True
    return mask

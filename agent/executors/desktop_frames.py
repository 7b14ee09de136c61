"""Report screenshots (compressed, size-capped) and "did the screen change?".

Screenshots go into every report (``screenshot_before`` / ``screenshot_after``) and through
msgpack as binary; a 1920x1080 monitor as a 1280-pixel JPEG is ~100-200 KB. The change test
compares two captures of the same monitor on a reduced grey image, so that JPEG-like noise,
a blinking caret or a clock's second hand (a few pixels) do not count as a change, and a
button press, a menu or a new window do.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from agent.executors.desktop_config import DesktopConfig
from messages.dispatch import ActionSite

CHANGE_CELL = 4
"""The change test compares the mean of 4x4 cells..."""
CHANGE_LEVEL = 8.0
"""...a cell changed if its mean grey moved by more than this (0-255)..."""
CHANGE_MIN_CELLS = 3
"""...and the screen changed if at least this many cells did."""


def encode_screenshot(image: Image.Image, config: DesktopConfig) -> bytes:
    """``image`` scaled down to ``screenshot_max_side`` and compressed."""
    img = image.convert("RGB")
    side = max(img.size)
    if side > config.screenshot_max_side:
        ratio = config.screenshot_max_side / side
        img = img.resize((max(1, round(img.width * ratio)), max(1, round(img.height * ratio))),
                         Image.Resampling.BILINEAR)
    out = io.BytesIO()
    if config.screenshot_format == "png":
        img.save(out, "PNG", optimize=False, compress_level=6)
    else:
        img.save(out, "JPEG", quality=config.screenshot_quality, optimize=False)
    return out.getvalue()


def _cells(image: Image.Image) -> np.ndarray:
    gray = image.convert("L")
    w, h = gray.width // CHANGE_CELL, gray.height // CHANGE_CELL
    if w == 0 or h == 0:
        return np.asarray(gray, dtype=np.float32)
    return np.asarray(gray.reduce(CHANGE_CELL), dtype=np.float32)


def changed_cells(before: Image.Image, after: Image.Image) -> int:
    """How many cells differ between two captures of the same area (size change: all)."""
    if before.size != after.size:
        return -1
    diff = np.abs(_cells(before) - _cells(after))
    return int((diff > CHANGE_LEVEL).sum())


def screen_changed(before: Image.Image, after: Image.Image) -> bool:
    n = changed_cells(before, after)
    return n < 0 or n >= CHANGE_MIN_CELLS


def site_box(area: tuple[int, int, int, int],
             rect: tuple[int, int, int, int] | None) -> tuple[float, float, float, float] | None:
    """``rect`` (desktop pixels) as fractions of ``area``, cut to it; None if outside."""
    if rect is None:
        return None
    ax, ay, aw, ah = area
    x0, y0 = max(rect[0], ax), max(rect[1], ay)
    x1, y1 = min(rect[0] + rect[2], ax + aw), min(rect[1] + rect[3], ay + ah)
    if x1 <= x0 or y1 <= y0 or aw <= 0 or ah <= 0:
        return None
    return (round((x0 - ax) / aw, 5), round((y0 - ay) / ah, 5), round((x1 - x0) / aw, 5),
            round((y1 - y0) / ah, 5))


def action_site(area: tuple[int, int, int, int], window: tuple[int, int, int, int] | None,
                focus: tuple[int, int, int, int] | None) -> ActionSite | None:
    """What the agent knows of where an action acts (messages.dispatch.ActionSite)."""
    site = ActionSite(window=site_box(area, window), focus=site_box(area, focus))
    return None if site.window is None and site.focus is None else site

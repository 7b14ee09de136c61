"""Places that answer an action: a small change away from where it acted, in the window
acted in, that comes back each time that action is performed and only then (a view's
number after "Vue suivante", a counter in a status line after "Valider";
docs/loop-detection.md).

Pixels alone cannot tell such a counter from a clock's digit: both change in place, step
after step. What tells them apart is when they change. A place answers the action now
performed when its last change came at a step of the same action, attributed to that
action then (``caused``: a new row, a status line written; or ``pending``: a small new
content not yet explained), and it has not changed since. A pending change needs a step
of another action since, that left the place as it was: a clock ticks whatever the agent
does, so it changes at the other steps too, or, with one action repeated, nothing shows
that it waits for that action.

A short label's digit changed by the action is new content too small to be caused
(a view's number after "Vue suivante", few pixels of one glyph): it is progress at once
(``label_changed``) when its tiles had been steady (a clock in the window ticks at the
first transitions too, and those tiles are then seen changing) and it is no caret shown
or hidden (a caret blinks in a field of the window acted in).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from actors.loop_detector.history_records import Transition
from actors.loop_detector.pixel import Frame, PixelParams
from actors.loop_detector.tile_masks import Mask, caret_stroke, dilate


def answering(mask: Mask, action: str, transitions: Iterable[Transition]) -> Mask:
    """Of ``mask`` (tiles changed now away from the site, in the window acted in, to
    content no frame of the ring showed), those that answer ``action`` (the module's
    rule), from the ring's ``transitions`` (oldest first)."""
    ok = np.zeros_like(mask)
    if not action or not mask.any():
        return ok
    resolved = np.zeros_like(mask)  # the tile's last change was found
    unchanged_since = np.zeros_like(mask)  # a step of another action left it as it was
    for t in reversed(list(transitions)):
        if t.changed.shape != mask.shape:
            break
        last_change = t.changed & ~resolved
        if t.action == action:
            attributed = np.zeros_like(mask) if t.caused is None else t.caused.copy()
            if t.pending is not None:
                attributed |= t.pending & unchanged_since
            ok |= last_change & attributed
        else:
            # The place left as it was: the tile and the tiles around it (a clock's digit
            # changes its neighbours at the steps it skips, docs/loop-detection.md).
            unchanged_since |= ~dilate(t.changed, 1) & ~resolved
        resolved |= last_change
    return mask & ok


def label_changed(pending: Mask, before: Frame, after: Frame, steady: bool,
                  pixel: PixelParams) -> bool:
    """Whether ``pending`` (small new content in the window acted in, away from its site,
    on tiles unchanged lately, outside the places that change by themselves) is a label
    the action changed (the module's rule); ``steady``: the history has seen enough
    transitions to call those tiles steady."""
    if not steady or not pending.any():
        return False
    return not caret_stroke(before, after, pending, pixel.tile, pixel.level)

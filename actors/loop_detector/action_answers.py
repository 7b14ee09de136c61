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
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from actors.loop_detector.history_records import Transition
from actors.loop_detector.tile_masks import Mask


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
            unchanged_since |= ~t.changed & ~resolved
        resolved |= last_change
    return mask & ok

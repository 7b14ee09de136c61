"""Monitor routing: which current screen is the one a step was recorded on."""

from __future__ import annotations

from collections.abc import Sequence

from messages.monitor import Monitor


def find_recorded(monitors: Sequence[Monitor], index: int | None,
                  recorded: Monitor | None) -> tuple[Monitor, str | None] | None:
    """The current monitor that is the recorded one, and how it was recognised, or None.

    One rule for the monitor router and the agent (agent/executors/desktop_target.py): with
    a recorded geometry the same *physical* screen is looked for, never just the same
    number: same rectangle (and name), else same name and size (``moved``), else same
    rectangle (``renamed``); a different idx for it is ``renumbered``. Without one, the
    index."""
    if recorded is None:
        found = next((m for m in monitors if m.idx == index), None)
        return None if found is None else (found, None)

    def names_agree(m: Monitor) -> bool:
        return recorded.name is None or m.name is None or m.name == recorded.name

    tiers: list[tuple[list[Monitor], str | None]] = [
        ([m for m in monitors if m.rect == recorded.rect and names_agree(m)], None),
        ([m for m in monitors if recorded.name is not None and m.name == recorded.name
          and (m.w, m.h) == (recorded.w, recorded.h)], "moved"),
        ([m for m in monitors if m.rect == recorded.rect], "renamed"),
    ]
    for candidates, how in tiers:
        if candidates:
            best = min(candidates, key=lambda m: (m.idx != index, m.idx))
            if how is None and index is not None and best.idx != index:
                how = "renumbered"
            return best, how
    return None



"""What follows the pointer (docs/loop-detection.md; screen_history.py): after a click
that moved the pointer, a faint change at the spots under its previous and new positions
is the hover highlight leaving one control for another, not progress; a mark drawn there
(a tick, a selected row) still is.

Drawn 1280x720 screens through the real core, as the agent reports clicks: the point
clicked and the window acted in."""

from __future__ import annotations

import io

from PIL import Image, ImageDraw

from actors.loop_detector.config import LoopConfig
from actors.loop_detector.core import LoopDetectorCore
from actors.loop_detector.pixel import PixelEmbedder
from messages.loop import ObserveStep

SIZE = (1280, 720)
WINDOW = (0.06, 0.12, 0.32, 0.5)
FACE, HOVER = 200, 228
"""A control's face and its hover tint: a change above the pixel level, below a mark's."""
XS = (0.19, 0.25, 0.31)
"""Three controls side by side: all of them inside the box judged around a click."""
Y = 0.15
N = LoopConfig().screen_static_n


def window(hovered: int | None, ticked: int = 0) -> bytes:
    """The window: three controls in a row, ``hovered`` tinted, the first ``ticked``
    with a tick drawn."""
    image = Image.new("L", SIZE, 0)
    draw = ImageDraw.Draw(image)
    w, h = SIZE
    draw.rectangle((WINDOW[0] * w, WINDOW[1] * h, (WINDOW[0] + WINDOW[2]) * w,
                    (WINDOW[1] + WINDOW[3]) * h), fill=FACE)
    for k, x in enumerate(XS):
        cx, cy = x * w, Y * h
        draw.rectangle((cx - 30, cy - 12, cx + 30, cy + 12),
                       fill=HOVER if k == hovered else FACE, outline=120)
        if k < ticked:
            draw.line((cx - 8, cy, cx - 2, cy + 8, cx + 10, cy - 8), fill=20, width=3)
    out = io.BytesIO()
    image.convert("RGB").save(out, "PNG")
    return out.getvalue()


def click(i: int, k: int, shot: bytes) -> ObserveStep:
    return ObserveStep.model_validate({
        "replay_id": "r1", "session_id": "s1", "action_id": f"a{i}", "base_action_id": f"a{i}",
        "action_type": "click", "target": {"x_pct": XS[k], "y_pct": Y}, "success": True,
        "actual_position": {"x_pct": XS[k], "y_pct": Y},
        "site": {"window": WINDOW, "focus": WINDOW}, "screenshot_after": shot})


def first_pause(steps: list[ObserveStep]) -> int | None:
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
    found = [i for i, s in enumerate(steps) if core.observe(s).verdict.detected]
    return found[0] if found else None


def test_a_hover_highlight_moving_over_buttons_that_do_nothing_is_no_progress() -> None:
    # Stuck from the first click: the pointer goes round three buttons, only the tint
    # under it moves. The first round's tints are content no frame showed yet: without
    # the pointer's trail they count, and the pause comes two captures late.
    cycle = [i % 3 for i in range(7)]
    first = first_pause([click(i, k, window(hovered=k)) for i, k in enumerate(cycle)])
    assert first == N - 1


def test_a_tick_drawn_under_the_moving_pointer_is_progress() -> None:
    # Three check boxes ticked in turn, the hover tint going along: each tick is a mark
    # drawn at the point, far above a tint.
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
    for i, k in enumerate(range(3)):
        core.observe(click(i, k, window(hovered=k, ticked=k + 1)))
    screen = core._replays["r1"].screen
    assert [t.progress for t in screen.transitions] == [True, True]


def test_a_tint_where_the_pointer_never_was_still_counts() -> None:
    # The pointer goes from the first control to the second; the third (inside the box
    # judged around the click, away from both spots) lights up: not the pointer's trail.
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
    core.observe(click(0, 0, window(hovered=None)))
    core.observe(click(1, 1, window(hovered=2)))
    assert core._replays["r1"].screen.transitions[-1].progress is True

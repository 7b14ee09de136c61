"""Two rules set on held-out-4's false pauses (tests/data/loop_real/, seen since:
docs/loop-detection.md), each on the real frames that made it:

- a label's digit spans two tiles, and one older frame must show both halves to call it a
  state seen: the larger Tk sheet's "Vue 3", whose lower half looks like "Vue 1"'s, is a
  view not seen, and "Vue suivante" chosen again is progress;
- a place answers the control an action acts on, not its exact coordinates: "Valider"
  found a pixel apart at its first press and at the next ones is one button, and its
  status line's counter going on is progress at every press.
"""

from __future__ import annotations

from actors.loop_detector.core import control_of, signature
from actors.loop_detector.history_records import DEFAULT_HISTORY
from actors.loop_detector.pixel import DEFAULT_PIXEL, PixelEmbedder, tile_difference
from bench.loop_real.dataset import load
from tests.unit.test_loop_caused import replay

SETS = {s.name: s for s in load()}
VIEW_DIGIT = (slice(8, 10), slice(33, 34))
"""The two tiles of the view's digit in ticker_bar-fiche_menu_next (upper, lower half)."""


def test_a_digit_whose_lower_half_looks_like_an_older_one_is_not_a_state_seen() -> None:
    seq = SETS["ticker_bar-fiche_menu_next"]
    pixel = PixelEmbedder()
    frames = [pixel.frame(f) for f in seq.frames]
    # "Vue 2" -> "Vue 3": the lower half changed, the upper half moved by less than that;
    # against "Vue 1" the lower half is the same content, the upper half is not.
    step = tile_difference(frames[2], frames[3])[VIEW_DIGIT][:, 0].tolist()
    first = tile_difference(frames[0], frames[3])[VIEW_DIGIT][:, 0].tolist()
    assert DEFAULT_HISTORY.seen_level < step[0] <= DEFAULT_PIXEL.level < step[1]
    assert first[1] <= DEFAULT_HISTORY.seen_level < DEFAULT_PIXEL.level < first[0]
    progress, paused, signal = replay(seq)
    assert seq.stuck_from is None
    assert progress[3] is True and paused is None, (progress, paused, signal)


def test_one_button_found_a_pixel_apart_is_one_control() -> None:
    seq = SETS["proclog_spin-web_save_count"]
    first, again = list(seq.steps("r"))[1:3]
    assert signature(first)[0] != signature(again)[0]  # the target a pixel apart
    assert control_of(first) == control_of(again)
    progress, paused, signal = replay(seq)
    assert seq.stuck_from is None and paused is None, (progress, paused, signal)


def test_a_repeated_action_that_changes_nothing_still_pauses() -> None:
    """The same rules leave "Valider" on an empty note (the same error each time) and a
    menu opened and closed by Escape where they were: paused within N captures."""
    for name in ("proclog_spin-web_valider_empty", "xload-web_menu_open_close"):
        seq = SETS[name]
        assert seq.stuck_from is not None
        _, paused, _ = replay(seq)
        assert paused is not None and paused - seq.stuck_from + 1 <= 4, name

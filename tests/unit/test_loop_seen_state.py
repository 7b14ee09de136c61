"""Going back to a state seen, judged on real frames of held-out-3's recordings
(tests/data/loop_real/, looked at since: docs/loop-detection.md):

- a tile shows a state an older frame showed only when its content is the same (JPEG codes
  the same content the same way), not when it differs by less than a change: a small
  counter's '5' and the '3' two presses before differ by less than the pixel level, and
  "Valider" pressed again, its counter going on, is progress at every press;
- a place answers an action only when the tiles around it, not only its own, stayed as
  they were at the steps of other actions: a clock's seconds digit that changes one tile
  at the steps of one action and its neighbour at the others is no answer.
"""

from __future__ import annotations

import numpy as np
import pytest

from actors.loop_detector.action_answers import answering
from actors.loop_detector.history_records import DEFAULT_HISTORY, Transition
from actors.loop_detector.pixel import DEFAULT_PIXEL, PixelEmbedder, tile_difference
from bench.loop_real.dataset import load
from tests.unit.test_loop_caused import replay

SETS = {s.name: s for s in load()}
COUNTER = (slice(672 // 12, 696 // 12), slice(708 // 12, 720 // 12))
"""The tiles of the digit of "Enregistré (N)" in vmstat_log-fiche_save_count (1920x1080
screen pixels, 12 to a tile)."""


def test_a_counter_digit_close_to_an_older_one_is_still_content_not_seen() -> None:
    seq = SETS["vmstat_log-fiche_save_count"]
    pixel = PixelEmbedder()
    frames = [pixel.frame(f) for f in seq.frames]
    # After the 5th press: '5' changed against '4' ...
    assert tile_difference(frames[4], frames[5])[COUNTER].max() > DEFAULT_PIXEL.level
    # ... and lies within the pixel level of '3' (the old rule called it a state seen),
    # while no tile of it is the same content as any older frame's.
    older = [int(tile_difference(f, frames[5])[COUNTER].max()) for f in frames[1:4]]
    assert min(older) <= DEFAULT_PIXEL.level
    assert min(older) > DEFAULT_HISTORY.seen_level


@pytest.mark.parametrize("name", ["vmstat_log-fiche_save_count", "vmstat_log-web_save_count",
                                  "vmstat_log-fiche_menu_next", "oclock_load-fiche_menu_next"])
def test_a_counter_going_on_is_progress_at_every_press(name: str) -> None:
    seq = SETS[name]
    assert seq.stuck_from is None and seq.part == "held-out-3"
    progress, first, signal = replay(seq)
    assert first is None, (name, first, signal, progress)


def test_an_erased_character_is_still_a_state_seen() -> None:
    """The stricter "seen" still finds content that came back: the field's text after
    BackSpace is the same as two steps before."""
    for name in ("app_clock-type_erase", "xload-web_type_erase", "top-type_erase"):
        seq = SETS[name]
        assert seq.stuck_from is not None
        progress, first, _ = replay(seq)
        assert first is not None and first - seq.stuck_from + 1 <= 4, (name, progress)


def test_a_place_answers_only_if_its_neighbours_stayed_as_they_were() -> None:
    """Tile (1, 1) changed at the last "type x" (pending) and not at the BackSpace since,
    but its neighbour (1, 2) did: a clock's digit spilling over two tiles, no answer."""
    here = np.zeros((4, 4), dtype=bool)
    here[1, 1] = True
    beside = np.zeros((4, 4), dtype=bool)
    beside[1, 2] = True
    quiet = np.zeros((4, 4), dtype=bool)
    ring = [Transition(1, here, True, action="x", pending=here)]
    assert answering(here, "x", [*ring, Transition(2, quiet, False, action="bs")]).any()
    assert not answering(here, "x", [*ring, Transition(2, beside, False, action="bs")]).any()


def test_a_clock_in_step_with_typing_is_no_answer() -> None:
    """app_clock-type_erase: a character typed then erased beside the form's clock, whose
    seconds digit changed one tile at both "type x" steps and its neighbour at the
    BackSpace between: stuck, found within N captures."""
    seq = SETS["app_clock-type_erase"]
    progress, first, _ = replay(seq)
    assert progress[3] is False, progress
    assert first is not None and first - seq.stuck_from + 1 <= 4, progress

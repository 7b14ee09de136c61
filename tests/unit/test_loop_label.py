"""A short label's digit changed by the action (action_answers.py ``label_changed``,
docs/loop-detection.md), on the real frames of the tuning part (tests/data/loop_real/):
a view's number after "Vue suivante" is progress even when one tile of it changes; a
clock in the window acted in, ticking at the first transitions, is not, nor a caret
shown in a field of that window; and ``caret_stroke`` on drawn pixels."""

from __future__ import annotations

import numpy as np

from actors.loop_detector.config import LoopConfig
from actors.loop_detector.tile_masks import caret_stroke
from bench.loop_real.dataset import load
from tests.unit.test_loop_caused import replay

SETS = {s.name: s for s in load() if s.part == "tuning"}
N = LoopConfig().screen_static_n


def test_a_view_number_changed_by_one_tile_is_progress() -> None:
    """The menu opened and "Vue suivante" chosen, three times: the first change of the
    view's number ('1' turned '2') stays below the pixel level, the second ('2' turned
    '3') changes one tile of the label far from the click; it is that step's progress,
    or the menu opened between makes three steps without any."""
    seq = SETS["xload-web_menu_next"]
    assert seq.stuck_from is None and seq.meta[3]["state_changed"]
    progress, first, _ = replay(seq)
    assert progress[3] is True, progress
    assert first is None, progress


def test_a_clock_ticking_in_the_window_from_the_start_is_no_label() -> None:
    """Toolbar buttons that do nothing clicked in turn, the sheet's own clock ticking in
    the window acted in: its first tick comes before any transition showed its tiles
    steady, and from then on they are seen changing."""
    for name in ("xload-web_hover_toolbar", "xload-fiche_hover_toolbar",
                 "watch-web_hover_toolbar", "watch-fiche_hover_toolbar",
                 "app_analog_spinner-hover_toolbar"):
        seq = SETS[name]
        progress, first, _ = replay(seq)
        assert first is not None and first - seq.stuck_from + 1 <= N, (name, progress)


def test_a_caret_shown_in_a_field_of_the_window_is_no_label() -> None:
    """A button that does nothing, pressed again and again: the form's caret shows in
    its field at the fifth step, after blinking in step with the captures until then."""
    seq = SETS["quiet-hover_noop"]
    progress, first, _ = replay(seq)
    assert progress[4] is False, progress
    assert first is not None and first - seq.stuck_from + 1 <= N, progress


def test_caret_stroke() -> None:
    before = np.full((8, 8), 240, dtype=np.uint8)
    tiles = np.zeros((4, 4), dtype=bool)
    tiles[1:3, 1] = True
    caret = before.copy()
    caret[2:6, 3] = 40  # one pixel column, four pixels tall
    assert caret_stroke(before, caret, tiles, 2, 20)
    assert caret_stroke(caret, before, tiles, 2, 20)  # hidden again
    glyph = before.copy()
    glyph[2:6, 2] = 40
    glyph[3, 3] = 40  # strokes across two columns
    assert not caret_stroke(before, glyph, tiles, 2, 20)
    dot = before.copy()
    dot[3, 3] = 200  # one pixel of a small digit
    assert not caret_stroke(before, dot, tiles, 2, 20)
    faint = before.copy()
    faint[2:6, 3] = 230  # below the level: nothing moved
    assert not caret_stroke(before, faint, tiles, 2, 20)
    outside = before.copy()
    outside[2:6, 6] = 40  # a caret, but outside the tiles judged
    assert not caret_stroke(before, outside, tiles, 2, 20)

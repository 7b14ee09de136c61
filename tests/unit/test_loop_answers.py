"""The rules of the patient sheet's recordings (tests/data/loop_real/, fiche_app.py in Tk,
web_app.py in Chromium; docs/loop-detection.md), each on the real frames of its tuning
sequences, and ``answering`` on masks:

- a place that answers the action (a status line's counter after "Valider", a view's
  number after "Vue suivante") is progress, a clock's digit is not;
- a click back at the point of the last input after a key (a menu opened, closed by
  Escape, opened again) needs content no frame showed;
- after a key, a caret-sized change where it acted is a caret's blink;
- typing next to a clock: only the tiles next to those seen changing are noise there;
- typing without a point goes where the replay last typed, until a click.
"""

from __future__ import annotations

import numpy as np
import pytest

from actors.loop_detector.action_answers import answering
from actors.loop_detector.config import LoopConfig
from actors.loop_detector.core import LoopDetectorCore
from actors.loop_detector.history_records import Transition
from actors.loop_detector.pixel import PixelEmbedder
from bench.loop_real.dataset import RealSequence, load
from tests.unit.test_loop_caused import replay

SETS = {s.name: s for s in load() if s.part == "tuning"}
N = LoopConfig().screen_static_n


def named(scenario: str) -> list[RealSequence]:
    found = [s for s in SETS.values() if s.scenario.endswith(scenario)]
    assert len(found) >= 4 and {s.meta[0]["site"] is not None for s in found} == {True}
    assert {s.scenario.split("_")[0] for s in found} == {"fiche", "web"}
    return found


def mask(*tiles: tuple[int, int]) -> np.ndarray:
    out = np.zeros((4, 4), dtype=bool)
    for r, c in tiles:
        out[r, c] = True
    return out


def t(serial: int, action: str, changed: np.ndarray, caused: np.ndarray | None = None,
      pending: np.ndarray | None = None) -> Transition:
    return Transition(serial, changed, False, action=action, caused=caused, pending=pending)


def test_answering_tells_a_place_that_waits_for_the_action_from_a_clock() -> None:
    here = mask((0, 0))
    none = mask()
    # Written by "Valider" last time (caused), unchanged since: answers "Valider".
    assert answering(here, "V", [t(1, "V", here, caused=here)]).any()
    # Small and new last time (pending): answers only if a step of another action has
    # left it unchanged since ...
    assert answering(here, "V", [t(1, "V", here, pending=here), t(2, "A", none)]).any()
    assert not answering(here, "V", [t(1, "V", here, pending=here)]).any()
    # ... a clock ticks at the other steps too, or never was the action's.
    assert not answering(here, "V", [t(1, "V", here, pending=here), t(2, "A", here)]).any()
    assert not answering(here, "V", [t(1, "V", here), t(2, "A", none)]).any()
    # Its last change came at another action's step: not this action's answer.
    assert not answering(here, "V", [t(1, "A", here, caused=here)]).any()
    assert not answering(here, "", [t(1, "", here, caused=here)]).any()


@pytest.mark.parametrize("scenario", ["save_count", "menu_next"])
def test_a_place_that_answers_the_action_is_progress(scenario: str) -> None:
    """A status line's counter far below "Valider", pressed again and again; a view's
    number after "Vue suivante", the menu opened between: in place, small, away from the
    click. Every one of these sequences is progress (the labels say so)."""
    paused = []
    for seq in named(scenario):
        assert seq.stuck_from is None
        progress, first, _ = replay(seq)
        if first is not None:
            paused.append((seq.name, first, progress))
    # One view's number changes first by less than the pixel level (a '1' turned '2'),
    # then by one tile: a label the action changed (test_loop_label.py).
    assert paused == [], paused


@pytest.mark.parametrize("scenario", ["menu_open_close", "dialog_reopen"])
def test_clicking_back_at_the_point_after_escape_is_no_progress(scenario: str) -> None:
    for seq in named(scenario):
        progress, first, _ = replay(seq)
        assert first is not None and first <= seq.stuck_from + N, (seq.name, progress)
        if scenario == "menu_open_close":
            # The menu opened again: a state seen (the clock inside a dialog's click box
            # can still count once: docs/loop-detection.md).
            assert progress[2] is False, (seq.name, progress)


def test_a_caret_blinking_after_a_key_is_no_progress() -> None:
    seq = SETS["xload-web_type_erase"]
    progress, first, _ = replay(seq)
    assert first is not None and first - seq.stuck_from + 1 <= N, (seq.name, progress)
    assert progress[4] is False  # BackSpace: the caret's blink, in a phase not seen yet


def test_typing_beside_a_clock_is_progress() -> None:
    for seq in named("type_note"):
        progress, first, _ = replay(seq)
        assert first is None and all(progress[1:]), (seq.name, progress)


def test_typing_without_a_point_goes_where_the_replay_last_typed() -> None:
    seq = SETS["xload-fiche_type_note"]
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
    rows = []
    for step in seq.steps("r1"):
        core.observe(step)
        rows.append(core._replays["r1"].typed)
    kinds = [(m["action_type"], m.get("actual_position") is None) for m in seq.meta]
    assert kinds[-1] == ("type", True) and kinds[0] == ("type", False)
    assert rows[-1] is not None and rows[-1] == rows[0]  # the note's row, not the window
    # A click forgets it: the focus may have moved (a dialog opened).
    saved = SETS["xload-fiche_save_count"]
    assert [m["action_type"] for m in saved.meta][:2] == ["type", "click"]
    typed = []
    for step in list(saved.steps("r2"))[:2]:
        core.observe(step)
        typed.append(core._replays["r2"].typed)
    assert typed[0] is not None and typed[1] is None

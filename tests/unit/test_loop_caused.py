"""What an action could have caused, and going back, on recorded frames
(tests/data/loop_real/, journal_app.py): a row added to a list far below the button is
progress, for ``screen_static`` and ``action_repeat`` alike; a character typed then erased
again and again is not, nor a hover highlight that goes from one button that does nothing
to the next and back."""

from __future__ import annotations

from actors.loop_detector.config import LoopConfig
from actors.loop_detector.core import LoopDetectorCore
from actors.loop_detector.pixel import PixelEmbedder
from bench.loop_real.dataset import RealSequence, load

SETS = {s.name: s for s in load() if s.part != "held-out-5"}  # the bench's only
N = LoopConfig().screen_static_n


def replay(seq: RealSequence) -> tuple[list[bool | None], int | None, str]:
    """Per step whether its transition was progress, the first pause and its signal."""
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
    progress: list[bool | None] = []
    first, signal = None, ""
    for i, step in enumerate(seq.steps("r1")):
        verdict = core.observe(step).verdict
        screen = core._replays["r1"].screen
        last = screen.transitions[-1] if screen.transitions else None
        progress.append(None if last is None or last.serial != screen._serial
                        else last.progress)
        if verdict.detected and first is None:
            first, signal = i, str(verdict.signal)
    return progress, first, signal


def named(scenario: str) -> list[RealSequence]:
    found = [s for s in SETS.values() if s.scenario == scenario]
    assert len(found) >= 4 and {s.held_out for s in found} == {False, True}
    return found


def test_rows_added_away_from_the_button_are_progress() -> None:
    for seq in named("add_rows"):
        assert seq.stuck_from is None
        progress, first, signal = replay(seq)
        # Seven presses of the same button at the same point: action_repeat judges them
        # by the screen's judgement, which sees each new row.
        assert progress[1:] == [True] * (len(progress) - 1), (seq.name, progress)
        assert first is None, (seq.name, first, signal)


def test_typing_then_erasing_again_and_again_is_no_progress() -> None:
    for seq in named("type_erase"):
        assert seq.stuck_from == 2
        progress, first, _ = replay(seq)
        assert first is not None and first - seq.stuck_from + 1 <= N, (seq.name, first)
        assert progress[1] is True, (seq.name, progress)  # "x" typed the first time
        # Erased, typed again, erased...: back to what the ring showed, up to the pause
        # (after it the runs start again).
        assert progress[2:first + 1] == [False] * (first - 1), (seq.name, progress)


def test_hover_highlights_going_back_are_no_progress() -> None:
    for seq in named("hover_toolbar"):
        assert seq.stuck_from == 0
        progress, first, signal = replay(seq)
        core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
        late = False
        for i, step in enumerate(seq.steps("r1")):
            core.observe(step)
            if i == 2:  # the first transition, as the second left it
                late = core._replays["r1"].screen.progressed(1) is True
        # Actualiser, Imprimer, Aide, Actualiser...: the tint under the pointer moves, the
        # pointer's trail (test_loop_pointer_trail.py); nothing counts at the point.
        assert [t.at_site for t in core._replays["r1"].screen.transitions][-3:] == [0] * 3
        assert progress[2:5] == [False] * 3, (seq.name, progress)
        # Paused within N captures, unless the first step's change stands as progress (a
        # busy desktop's first changes); top renewing from the first step is taken back
        # when it renews again (test_loop_renewed_away.py).
        assert (first, signal) == (N if late else N - 1, "screen_static"), (seq.name,
                                                                          progress)


def test_a_check_box_clicked_at_the_same_point_keeps_its_changes() -> None:
    # Ticked, unticked, ticked...: the same point, so no pointer trail; each change counts
    # (the set labels it progress: the box's state changes at every step).
    for seq in (s for s in SETS.values() if s.scenario == "check_toggle"):
        progress, first, _ = replay(seq)
        assert first is None and progress.count(True) >= len(progress) - 2, (seq.name,
                                                                              progress)

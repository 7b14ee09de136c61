"""The loop detector on the recorded real-application set (tests/data/loop_real/, recorded
from real programs under Xvfb by bench/loop_real/record.py), fed as the running system
feeds it: the agent's JPEG, the action, the point clicked, the window and focus.

Never a pause on a sequence whose application state changed to the end; the stuck ones
paused, all but the known ones (``LATE``) within N captures of the stuck behaviour
starting (bench/loop_eval.py prints each one that is not, and why)."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from actors.loop_detector.config import LoopConfig
from actors.loop_detector.core import LoopDetectorCore
from actors.loop_detector.pixel import PixelEmbedder
from bench.loop_real.dataset import RealSequence, load

N = LoopConfig().screen_static_n


def first_pauses() -> list[tuple[str, int | None, int | None, str]]:
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
    out = []
    for k, seq in enumerate(load()):
        if seq.part == "held-out-5":
            continue  # never tuned on: bench/loop_eval.py alone reports it
        first, message = None, ""
        for i, step in enumerate(seq.steps(f"r{k}")):
            verdict = core.observe(step).verdict
            if verdict.detected and first is None:
                first, message = i, verdict.pause_message()
        core.forget(f"r{k}")
        out.append((seq.name, seq.stuck_from, first, message))
    return out


KNOWN: dict[str, set[str]] = {
    # None since a state seen is the same content, one frame showing the whole glyph,
    # and a place answers the control acted on (test_loop_seen_state.py,
    # test_loop_glyph_control.py).
    "false": set(),
    # A clock inside the click box of one action repeated, never seen ticking elsewhere;
    # a clock ticking in step with a menu opened and closed (it looks like the menu's
    # answer, action_answers.py).
    "never": {"xload-fiche_valider_empty", "clocks-fiche_valider_empty",
              "clocks-fiche_menu_open_close", "clocks-web_menu_open_close",
              "oclock_load-fiche_valider_empty", "ticker_bar-fiche_menu_open_close"},
    # A capture late: a busy desktop's first changes; a caret's first blink after typing;
    # a clock's first visible tick. (A dialog opened again as it was, beside a clock or a
    # spinner, a character typed again beside a caret's new phase, a larger font's caret
    # after a key, no longer: test_loop_went_back.py, test_loop_caret.py.)
    "late": {"busy-hover_toolbar", "eyes_top-fiche_type_erase",
             "oclock_load-fiche_menu_open_close"},
}
"""Each part's misses (bench/loop_eval.py prints them all): any other is a regression."""


def test_real_set_no_false_pause_and_stuck_found() -> None:
    results = first_pauses()
    assert len(results) >= 150
    progress = [r for r in results if r[1] is None]
    stuck = [r for r in results if r[1] is not None]
    assert len(progress) >= 70 and len(stuck) >= 90
    assert {r[0] for r in progress if r[2] is not None} == KNOWN["false"]
    assert [r for r in stuck if r[2] is not None and r[2] < r[1]] == []  # never early
    assert {r[0] for r in stuck if r[2] is None} == KNOWN["never"]
    late = {r[0] for r in stuck if r[2] is not None and r[2] - r[1] + 1 > N}
    assert late == KNOWN["late"], late ^ KNOWN["late"]
    # The pause says which signal fired and what it saw.
    assert all(("screen_static" in r[3] and "changed_at_site=" in r[3])
               or "action_repeat" in r[3] for r in stuck if r[2] is not None)


SETS = {s.name: s for s in load() if s.part != "held-out-5"}  # the bench's only
DIALOG = (505, 171, 732, 264)
"""The form's "Fiche" dialog in app_analog_spinner-dialog_flow's first frame (1280 wide);
on the desktop's empty black there in the wait_dialog sequences."""


def with_dialog(seq: RealSequence, shown: range) -> list[bytes]:
    """The sequence's frames, the real dialog pasted where it opens on the frames ``shown``."""
    dialog = Image.open(io.BytesIO(SETS["app_analog_spinner-dialog_flow"].frames[0])).crop(
        DIALOG)
    frames = []
    for i, data in enumerate(seq.frames):
        if i in shown:
            image = Image.open(io.BytesIO(data)).convert("RGB")
            image.paste(dialog, DIALOG[:2])
            out = io.BytesIO()
            image.save(out, "JPEG", quality=70)
            data = out.getvalue()
        frames.append(data)
    return frames


def first_pause(seq: RealSequence, frames: list[bytes]) -> int | None:
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
    for i, step in enumerate(seq.steps("r1")):
        if core.observe(step.model_copy(update={"screenshot_after": frames[i]})).verdict.detected:
            return i
    return None


@pytest.mark.parametrize("name", sorted(n for n in SETS if n.endswith("wait_dialog")))
def test_waits_learn_the_noise_and_a_window_opening_meanwhile_is_progress(name: str) -> None:
    """A click, then waits for a window that never comes, among the real noise: paused at
    the 4th capture, the noise seen for the first time at the first waits included (the
    wait after judges them again). The same waits, the real dialog opening at wait k: k
    counts as progress (the pause comes N-1 waits after it), whether the dialog stays or
    closes again at the next wait."""
    seq = SETS[name]
    assert seq.stuck_from == 0 and [m["action_type"] for m in seq.meta][1:] == ["wait"] * 6
    assert first_pause(seq, seq.frames) == N - 1
    for k in (1, 2, 3):
        assert first_pause(seq, with_dialog(seq, range(k, len(seq.frames)))) == k + N - 1
        flicker = first_pause(seq, with_dialog(seq, range(k, k + 1)))
        assert flicker is None or flicker >= k + N - 1

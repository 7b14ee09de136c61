"""A click that opens again, as it was, a dialog closed by Escape goes back to a state
seen, even when a clock ticks or a spinner turns where it acted meanwhile (held-out-4's
and the tuning part's dialogs reopened, seen: docs/loop-detection.md)."""

from __future__ import annotations

import pytest

from bench.loop_real.dataset import load
from tests.unit.test_loop_caused import replay

SETS = {s.name: s for s in load() if s.part != "held-out-5"}
N = 4


@pytest.mark.parametrize("name", ["ticker_bar-fiche_dialog_reopen",
                                  "proclog_spin-web_dialog_reopen",
                                  "watch-fiche_dialog_reopen", "xload-web_dialog_reopen"])
def test_a_dialog_opened_again_beside_a_clock_or_a_spinner_is_no_progress(name: str) -> None:
    seq = SETS[name]
    assert seq.stuck_from is not None
    progress, paused, _ = replay(seq)
    assert paused is not None and paused - seq.stuck_from + 1 <= N, (name, progress)


@pytest.mark.parametrize("name", ["xload-fiche_dialog_fill", "watch-web_dialog_fill",
                                  "app_clock-check_toggle", "xeyes-type_name",
                                  "eyes_top-fiche_type_note"])
def test_a_dialog_filled_a_box_ticked_and_text_typed_are_still_progress(name: str) -> None:
    seq = SETS[name]
    assert seq.stuck_from is None
    progress, paused, _ = replay(seq)
    assert paused is None, (name, progress)


def test_a_character_typed_again_beside_a_caret_in_a_new_phase_went_back() -> None:
    """'x' typed after BackSpace brings the field's text back as it was; the caret beside
    it blinking in a phase no frame of the ring showed is no new content (held-out-4's
    larger Tk sheet, seen)."""
    seq = SETS["ticker_bar-fiche_type_erase"]
    assert seq.stuck_from is not None
    progress, paused, _ = replay(seq)
    assert paused is not None and paused - seq.stuck_from + 1 <= N, progress

"""Text targets under the Windows agent: Windows CPython 3.11 under Wine reads a real Win32
window with tesserocr's win_amd64 wheel and the models the agent folder ships
(cli/bundle.py ``tessdata``), then clicks, or does not (docs/grounding.md).

The window (tests/fixtures/win_target.py) has two real Win32 push buttons, "Enregistrer"
and "Annuler", and records every BN_CLICKED they send and every click on its canvas. It
stands on the monitor left of the primary one, at x = -1280: the point read is offset by
a negative origin.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.conftest import wait_until
from tests.win_desktop import LEFT, WinDesk, WinExecutor, WinTarget

ON_LEFT = {"idx": 1, "offset_x": LEFT[0], "offset_y": LEFT[1], "w": LEFT[2], "h": LEFT[3],
           "source": "action"}
CONFIG = {"correction_timeout_s": 1.0, "screenshot_format": "png",
          "screen_change_timeout_s": 0.5}

pytestmark = pytest.mark.timeout(400)


@pytest.fixture
def target(win_desk: WinDesk) -> Iterator[WinTarget]:
    t = win_desk.target("Dossier patient", (LEFT[0] + 300, 200, 640, 420),
                        "--buttons", "Enregistrer,Annuler")
    yield t
    t.close()


@pytest.fixture
def executor(win_desk: WinDesk) -> WinExecutor:
    # No LEA_OCR_TESSDATA: the models are found in the agent folder itself.
    return win_desk.executor(**CONFIG)


def test_enregistrer_is_read_on_the_left_monitor_and_pressed(executor: WinExecutor,
                                                            target: WinTarget) -> None:
    outcome = executor.run(ON_LEFT, type="click", target_spec={"by_text": "Enregistrer"})
    assert outcome["success"], (outcome.get("error"), outcome.get("target_description"))
    assert outcome["resolution_method"] == "ocr" and outcome["resolution_score"] >= 0.8
    assert wait_until(lambda: target.events("pressed")) == [
        {"event": "pressed", "text": "Enregistrer"}]
    x, y, w, h = target.buttons["Enregistrer"]
    point = outcome["actual_position"]
    assert point["x"] < 0 and x <= point["x"] < x + w and y <= point["y"] < y + h, \
        (point, target.buttons)


def test_a_text_not_on_the_screen_is_not_clicked(executor: WinExecutor,
                                                 target: WinTarget) -> None:
    outcome = executor.run(ON_LEFT, type="click",
                           target_spec={"by_text": "Supprimer le dossier",
                                        "x_pct": 0.4, "y_pct": 0.3})
    assert not outcome["success"] and outcome["error"] == "target_not_found", outcome
    assert "Supprimer le dossier" in str(outcome), outcome
    time.sleep(1.0)  # a click would have been recorded by now: none must come
    assert target.events("click") == [] and target.events("pressed") == []

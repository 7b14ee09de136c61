"""The desktop executor on a real X display with two monitors (Xvfb + RandR monitors).

Monitor 0 is 1280x1024 at (0, 0) (primary), monitor 1 is 1920x1080 at (1280, 0): indices
are 0-based, as the monitor router numbers them. A Tk window on monitor 1
(tests/fixtures/click_target.py) logs, in desktop coordinates, every click and keystroke
that reaches it; the executor runs in this process, against that display, with real
pyautogui input and mss capture.

pyautogui connects to X once per process, so every test here shares one display (module
scope) and a fresh target window.
"""

from __future__ import annotations

import base64
import io
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent.effects import EffectsLog, read_effects
from agent.executors.base import ActionOutcome
from agent.executors.desktop_config import DesktopConfig
from agent.grounding.anchor import DEFAULT_MIN_SCORE
from messages.dispatch import DispatchAction, DispatchMeta
from messages.monitor import COMPOSITE, MonitorResolution
from messages.workflow import Action
from tests.click_window import BUTTON, BUTTON_BLUE, Target
from tests.conftest import wait_until
from tests.xdisplay import XDisplay, start_xdisplay

MONITORS = [(1280, 1024, 0, 0), (1920, 1080, 1280, 0)]
SECOND = MonitorResolution(idx=1, offset_x=1280, offset_y=0, w=1920, h=1080, source="action")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def display() -> Iterator[XDisplay]:
    d = start_xdisplay(MONITORS, window_manager=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DISPLAY", d.display)
        yield d
    d.close()


@pytest.fixture(scope="module")
def executor(display: XDisplay) -> Iterator[Any]:
    from agent.executors.desktop import DesktopExecutor

    ex = DesktopExecutor(DesktopConfig(correction_timeout_s=3.0, screenshot_format="png",
                                       screen_change_timeout_s=0.6))
    yield ex
    ex.close()


@pytest.fixture
def target(display: XDisplay, tmp_path: Path) -> Iterator[Target]:
    t = Target(display, tmp_path, "Cible", 1580, 150)
    yield t
    t.close()


def run(executor: Any, effects: EffectsLog | None = None,
        resolution: MonitorResolution | None = SECOND, **action: Any) -> ActionOutcome:
    dispatch = DispatchAction(
        replay_id="r1", session_id="s1", machine_id="m1",
        action=Action.model_validate({"action_id": "a1", **action}), attempt_id="t1",
        dispatch_meta=DispatchMeta(first_dispatched_at=time.time()),
        monitor_resolution=resolution)
    outcome: ActionOutcome = executor.execute(dispatch, effects)
    return outcome


def pct_of_second(x: float, y: float) -> dict[str, float]:
    return {"x_pct": (x - 1280) / 1920, "y_pct": y / 1080}


def anchor_b64(image: Image.Image) -> str:
    out = io.BytesIO()
    image.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def button_crop(shift: int = 0, margin: int = 6) -> tuple[int, int, int, int]:
    left, top, right, bottom = BUTTON
    return (left - margin + shift, top - margin + shift, right + margin + shift,
            bottom + margin + shift)


def grab_canvas(target: Target) -> Image.Image:
    from agent.screen.capture import capture

    x, y, w, h = target.canvas
    return capture((x, y, w, h)).image


def near(event: dict[str, Any], x: float, y: float, px: float = 2) -> bool:
    return abs(event["x"] - x) <= px and abs(event["y"] - y) <= px


# Capture ------------------------------------------------------------------------------------

def test_capture_of_monitor_1_returns_only_its_pixels(display: XDisplay, target: Target) -> None:
    from agent.screen.capture import capture, capture_monitor

    shot = capture_monitor(1)
    assert shot.rect == (1280, 0, 1920, 1080)
    whole = capture(None)
    assert whole.rect == (0, 0, 3200, 1080)
    assert shot.image.tobytes() == whole.image.crop((1280, 0, 3200, 1080)).tobytes()
    bx, by = target.button_centre()
    assert shot.image.getpixel((int(bx) - 1280 - 50, int(by))) == BUTTON_BLUE
    first = capture_monitor(0)
    assert first.rect == (0, 0, 1280, 1024)
    assert BUTTON_BLUE not in {c for _n, c in first.image.getcolors(1 << 20) or []}


# Pointer ------------------------------------------------------------------------------------

def test_click_by_pct_of_monitor_1_lands_on_that_pixel(executor: Any, target: Target,
                                                      tmp_path: Path) -> None:
    effects = EffectsLog(tmp_path / "effects.jsonl", "m1")
    x, y = target.canvas[0] + 300, target.canvas[1] + 200
    outcome = run(executor, effects, type="click", target_spec=pct_of_second(x, y))
    assert outcome.success, outcome
    assert outcome.warning is None  # the dot it drew is a change
    clicks = wait_until(lambda: target.events("click"))
    assert len(clicks) == 1 and near(clicks[0], x, y) and clicks[0]["button"] == 1
    assert outcome.actual_position is not None and near(outcome.actual_position, x, y)
    assert outcome.resolution_method == "position"
    assert [e["action_id"] for e in read_effects(effects.path)] == ["a1"]
    assert Image.open(io.BytesIO(outcome.screenshot_before or b"")).size == (1280, 720)
    effects.close()


def test_without_a_resolution_the_agent_finds_monitor_index_itself(executor: Any,
                                                                  target: Target) -> None:
    x, y = target.canvas[0] + 100, target.canvas[1] + 250
    outcome = run(executor, resolution=None, type="click", monitor_index=1,
                  target_spec=pct_of_second(x, y))
    assert outcome.success, outcome
    assert near(wait_until(lambda: target.events("click"))[0], x, y)


def test_an_invalid_index_is_not_clicked_on_the_composite(executor: Any, display: XDisplay,
                                                          tmp_path: Path) -> None:
    """The router called the index invalid: the middle of the composite (here on the
    canvas of a window) is not where the step was recorded; no input, a person decides."""
    t = Target(display, tmp_path, "Cible", 1400, 300)
    try:
        cx, cy = 3200 // 2, 1080 // 2
        assert t.canvas[0] < cx < t.canvas[0] + t.canvas[2] and \
            t.canvas[1] < cy < t.canvas[1] + t.canvas[3]
        effects = EffectsLog(tmp_path / "effects.jsonl", "m1")
        outcome = run(executor, effects, COMPOSITE.model_copy(update={"reason": "invalid_index"}),
                      type="click", monitor_index=5, target_spec={"x_pct": 0.5, "y_pct": 0.5})
        assert (outcome.success, outcome.error, outcome.needs_human) == (
            False, "monitor_unavailable", True), outcome
        assert outcome.target_description is not None and "monitor 5" in \
            outcome.target_description
        time.sleep(0.5)
        assert t.events("click") == [] and read_effects(effects.path) == []
        effects.close()
    finally:
        t.close()


@pytest.mark.parametrize("variant", ["exact", "shifted_1px", "rescaled_105", "rescaled_95"])
def test_click_by_anchor_lands_on_the_button(executor: Any, target: Target, variant: str) -> None:
    canvas = grab_canvas(target)
    crop = canvas.crop(button_crop(shift=1 if variant == "shifted_1px" else 0))
    if variant.startswith("rescaled"):
        factor = int(variant.rpartition("_")[2]) / 100
        crop = crop.resize((round(crop.width * factor), round(crop.height * factor)),
                           Image.Resampling.BICUBIC)
    outcome = run(executor, type="click", target_spec={"anchor_image_base64": anchor_b64(crop)})
    assert outcome.success, outcome
    assert outcome.resolution_method == "template_match"
    assert outcome.resolution_score is not None and outcome.resolution_score >= DEFAULT_MIN_SCORE
    assert outcome.resolution_elapsed_ms is not None
    clicks = wait_until(lambda: target.events("click"))
    bx, by = target.button_centre()
    expected = (bx + 1, by + 1) if variant == "shifted_1px" else (bx, by)
    assert near(clicks[0], *expected), (clicks, expected)


def test_absent_anchor_is_target_not_found_and_nothing_is_clicked(
        executor: Any, target: Target, tmp_path: Path) -> None:
    effects = EffectsLog(tmp_path / "effects.jsonl", "m1")
    absent = Image.new("RGB", (90, 40), "white")
    for i in range(0, 90, 6):
        absent.paste((200, 30 * (i % 7), 90), (i, (i * 7) % 30, i + 3, (i * 7) % 30 + 8))
    outcome = run(executor, effects, type="click",
                  target_spec={"anchor_image_base64": anchor_b64(absent)})
    assert not outcome.success
    assert outcome.error == "target_not_found"
    assert outcome.warning == "visual_resolve_failed"
    assert outcome.resolution_method == "template_match"
    assert outcome.resolution_score is not None and outcome.resolution_score < DEFAULT_MIN_SCORE
    time.sleep(0.3)
    assert target.events("click") == []
    assert read_effects(effects.path) == []
    effects.close()


def test_double_and_right_clicks(executor: Any, target: Target) -> None:
    x, y = target.canvas[0] + 400, target.canvas[1] + 300
    assert run(executor, type="double_click", target_spec=pct_of_second(x, y)).success
    assert run(executor, type="right_click", target_spec=pct_of_second(x + 30, y)).success
    clicks = wait_until(lambda: len(target.events("click")) >= 3 and target.events("click"))
    assert [c["button"] for c in clicks] == [1, 1, 3]


def test_a_click_that_changes_nothing_warns_unless_setup(executor: Any, target: Target) -> None:
    spot = pct_of_second(target.canvas[0] + 500, target.canvas[1] + 100)
    assert run(executor, type="click", target_spec=spot).warning is None
    again = run(executor, type="click", target_spec=spot)  # a dot on the same dot
    assert again.success and again.warning == "no_screen_change"
    setup = run(executor, type="click", target_spec=spot, parameters={"_setup_phase": True})
    assert setup.success and setup.warning is None
    assert len(wait_until(lambda: len(target.events("click")) == 3 and target.events("click")))


def test_scroll_over_the_target(executor: Any, target: Target) -> None:
    x, y = target.canvas[0] + 300, target.canvas[1] + 150
    assert run(executor, type="scroll", target_spec=pct_of_second(x, y),
               parameters={"delta": -2}).success
    wheel = wait_until(lambda: len(target.events("click")) >= 2 and target.events("click"))
    assert [c["button"] for c in wheel] == [5, 5]  # X11: wheel down


def test_failsafe_corner_is_reported_not_raised(executor: Any, target: Target,
                                                tmp_path: Path) -> None:
    effects = EffectsLog(tmp_path / "effects.jsonl", "m1")
    _warp(0, 0)
    try:
        outcome = run(executor, effects, type="click",
                      target_spec=pct_of_second(target.canvas[0] + 10, target.canvas[1] + 10))
    finally:
        _warp(640, 512)  # until the mouse leaves the corner, every action stops there
    assert not outcome.success and outcome.error == "failsafe_triggered" and outcome.needs_human
    assert read_effects(effects.path) == [] and target.events("click") == []
    effects.close()


def _warp(x: int, y: int) -> None:
    from Xlib import display as xdisplay

    conn = xdisplay.Display(os.environ["DISPLAY"])
    try:
        conn.screen().root.warp_pointer(x, y)
        conn.sync()
    finally:
        conn.close()


# Keyboard -----------------------------------------------------------------------------------

def test_typing_reaches_the_field_on_monitor_1(executor: Any, target: Target) -> None:
    field = pct_of_second(target.entry[0] + 40, target.entry[1] + target.entry[3] / 2)
    assert run(executor, type="type", target_spec=field, parameters={"text": "abc"}).success
    assert wait_until(lambda: any(e["value"] == "abc" for e in target.events("text")))
    outcome = run(executor, type="type", target_spec=field,
                  parameters={"text": "Hélène Noël", "clear_first": True})
    assert outcome.success, outcome
    assert wait_until(lambda: target.events("text")[-1]["value"] == "Hélène Noël")
    assert run(executor, type="key_combo", parameters={"keys": ["BackSpace"]}).success
    assert wait_until(lambda: target.events("text")[-1]["value"] == "Hélène Noë")


def test_unknown_key_is_refused_before_any_input(executor: Any, target: Target,
                                                 tmp_path: Path) -> None:
    effects = EffectsLog(tmp_path / "effects.jsonl", "m1")
    outcome = run(executor, effects, type="key_combo", parameters={"keys": ["ctrl", "nokey"]})
    assert not outcome.success and outcome.error is not None
    assert outcome.error.startswith("invalid_parameters:unknown key")
    assert read_effects(effects.path) == []
    effects.close()


# The window after an input (expected_window_title) -----------------------------------------

@pytest.mark.parametrize("then", [("", 0), ("Facturation", 500)])
def test_a_window_unknown_after_the_click_is_not_the_expected_one(
        executor: Any, display: XDisplay, tmp_path: Path, then: tuple[str, int]) -> None:
    """The click closes the window: for a moment (then another window comes up) or for
    good, no window is in front, and that read used to end the check as passed. The input
    happened (a success, never redone) with the warning that pauses the replay."""
    t = Target(display, tmp_path, "Cible", 1580, 150, then=then)
    try:
        x, y = t.canvas[0] + 300, t.canvas[1] + 200
        outcome = run(executor, type="click", target_spec=pct_of_second(x, y),
                      expected_window_title="Confirmation")
        assert outcome.success and outcome.warning == "wrong_window", outcome
        assert len(t.events("click")) == 1
        assert outcome.target_description is not None
        assert outcome.target_description.startswith("after the action, ")
        if not then[0]:
            assert "could not be read (expected 'Confirmation')" in outcome.target_description
    finally:
        t.close()


# verify_screen guards --------------------------------------------------------------------

def test_title_guard_matches_case_insensitively(executor: Any, target: Target) -> None:
    outcome = run(executor, type="verify_screen", parameters={
        "expected_window_title_contains": ["Rechercher", "cible"], "timeout_ms": 1000})
    assert outcome.success and outcome.warning is None


def test_title_guard_mismatch_then_the_window_comes_up(executor: Any, display: XDisplay,
                                                      target: Target, tmp_path: Path) -> None:
    opened: list[Target] = []

    def person_opens_it() -> None:
        time.sleep(1.0)
        opened.append(Target(display, tmp_path, "Bloc-notes - Sans titre", 200, 200))

    told: list[tuple[str, dict[str, Any]]] = []
    executor.on_progress = lambda dispatch, info: told.append((dispatch.action.action_id, info))
    helper = threading.Thread(target=person_opens_it)
    helper.start()
    try:
        outcome = run(executor, type="verify_screen", parameters={
            "expected_window_title_contains": ["Bloc-notes", "Notepad"], "timeout_ms": 200,
            "_setup_phase": True})
    finally:
        executor.on_progress = None
        helper.join()
        for t in opened:
            t.close()
    assert [(a, i["state"], i["observed_title"]) for a, i in told] == [
        ("a1", "awaiting_human_correction", "Cible")]
    assert outcome.success, outcome
    assert outcome.warning == "setup_guard_window_mismatch"
    assert outcome.correction is not None
    assert outcome.correction["observed_title"] == "Cible"
    assert outcome.correction["corrected_title"] == "Bloc-notes - Sans titre"


def test_title_guard_mismatch_nobody_comes_needs_human(executor: Any, target: Target) -> None:
    started = time.monotonic()
    outcome = run(executor, type="verify_screen", parameters={
        "expected_window_title_contains": ["Bloc-notes"], "timeout_ms": 200})
    assert time.monotonic() - started >= 3.0  # the configured correction timeout
    assert not outcome.success and outcome.needs_human
    assert outcome.error == "window_title_mismatch"
    assert outcome.warning == "setup_guard_window_mismatch"

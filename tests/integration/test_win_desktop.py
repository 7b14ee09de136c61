"""The desktop executor on Windows: Windows CPython 3.11 (the agent folder's) under Wine, on
real Win32 windows (tests/fixtures/win_target.py), two monitors, one at x = -1280.

Each action goes through ``DesktopExecutor.execute`` in the Windows python
(tests/fixtures/win_executor.py); the window it aims at records, in screen coordinates,
every WM_LBUTTONDOWN that reaches it and reads its EDIT control back with WM_GETTEXT. The
Linux/X11 twin is test_desktop_executor.py. Setup: tests/win_desktop.py.
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent.effects import read_effects
from tests.conftest import wait_until
from tests.win_desktop import LEFT, PRIMARY, WinDesk, WinExecutor, WinTarget

BUTTON = (60, 50, 200, 100)
"""win_target.BUTTON: the drawn button, canvas pixels (left, top, right, bottom)."""
BUTTON_BLUE = (0x2A, 0x6F, 0xDB)
ON_PRIMARY = {"idx": 0, "offset_x": 0, "offset_y": 0, "w": 1920, "h": 1080, "source": "action"}
CONFIG = {"correction_timeout_s": 1.0, "screenshot_format": "png",
          "screen_change_timeout_s": 0.5}

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def executor(win_desk: WinDesk) -> WinExecutor:
    return win_desk.executor(**CONFIG)


@pytest.fixture
def target(win_desk: WinDesk, executor: WinExecutor) -> Iterator[WinTarget]:
    t = win_desk.target("Dossier patient", (300, 200, 640, 420))
    yield t
    t.close()


def pct(rect: tuple[int, int, int, int], x: float, y: float) -> dict[str, float]:
    """``target_spec`` of the point ``(x, y)`` as a fraction of the monitor ``rect``."""
    return {"x_pct": (x - rect[0]) / rect[2], "y_pct": (y - rect[1]) / rect[3]}


def near(event: dict[str, Any], x: float, y: float, px: float = 2) -> bool:
    return abs(event["x"] - x) <= px and abs(event["y"] - y) <= px


def button_centre(t: WinTarget) -> tuple[float, float]:
    left, top, right, bottom = BUTTON
    return t.canvas[0] + (left + right) / 2, t.canvas[1] + (top + bottom) / 2


def grab(executor: WinExecutor, rect: list[int] | tuple[int, ...] | None) -> tuple[
        list[int], Image.Image]:
    shot = executor.ask(op="grab", rect=None if rect is None else list(rect))
    return shot["rect"], Image.open(io.BytesIO(base64.b64decode(shot["png"]))).convert("RGB")


def anchor_of_button(executor: WinExecutor, t: WinTarget, margin: int = 6) -> str:
    left, top, right, bottom = BUTTON
    _rect, image = grab(executor, [t.canvas[0] + left - margin, t.canvas[1] + top - margin,
                                   right - left + 2 * margin, bottom - top + 2 * margin])
    out = io.BytesIO()
    image.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def clicks_at(executor: WinExecutor, t: WinTarget, points: list[tuple[int, int]]) -> None:
    """Click each canvas point by position and check each lands within 2 px."""
    for i, (dx, dy) in enumerate(points):
        x, y = t.canvas[0] + dx, t.canvas[1] + dy
        outcome = executor.run(ON_PRIMARY, type="click", target_spec=pct(PRIMARY, x, y))
        assert outcome["success"], outcome
        got = wait_until(lambda i=i: len(t.events("click")) > i and t.events("click"))[i]
        assert near(got, x, y), (got, (x, y))


# The screen ---------------------------------------------------------------------------------

def test_the_executor_is_per_monitor_dpi_aware_and_sees_both_monitors(
        executor: WinExecutor) -> None:
    """Wine 8 makes every process per-monitor aware from its start and refuses any change
    (SetProcessDpiAwarenessContext: ERROR_INVALID_PARAMETER, it does not know V2;
    SetProcessDpiAwareness: E_ACCESSDENIED): the agent says so and reads the awareness in
    effect, and both monitors at 100 %."""
    assert executor.ready["awareness"] == 2  # PER_MONITOR (agent/screen/win32.py)
    rects = [(m["x"], m["y"], m["w"], m["h"]) for m in executor.ready["monitors"]]
    assert rects == [PRIMARY, LEFT]
    assert executor.ready["desktop"] == [-1280, 0, 3200, 1080]
    scaling = executor.ready["dpi"]
    assert scaling["awareness"] == 2 and scaling["refusal"] is None, scaling
    assert scaling["monitors"] == [[*PRIMARY, 96], [*LEFT, 96]], scaling
    assert scaling["asked"] == (
        "SetProcessDpiAwarenessContext(PER_MONITOR_AWARE_V2) refused, error 87; "
        "SetProcessDpiAwareness(PER_MONITOR) refused, HRESULT 0x80070005"), scaling


@contextmanager
def unaware(executor: WinExecutor) -> Iterator[None]:
    """The executing thread DPI unaware (as an agent whose per-monitor awareness Windows
    refused), then per-monitor aware again: the executor is shared by the session."""
    assert executor.ask(op="thread_awareness", context=-1)["after"] == 0
    try:
        yield
    finally:
        assert executor.ask(op="thread_awareness", context=-3)["after"] == 2


def test_an_unaware_agent_at_100_percent_still_clicks(executor: WinExecutor,
                                                      target: WinTarget) -> None:
    """Nothing is scaled at 96 DPI: the refusal of the next tests is not a blanket one."""
    x, y = target.canvas[0] + 300, target.canvas[1] + 200
    with unaware(executor):
        assert executor.ask(op="screen")["dpi"]["refusal"] is None
        outcome = executor.run(ON_PRIMARY, type="click", target_spec=pct(PRIMARY, x, y))
    assert outcome["success"], outcome
    (click,) = wait_until(lambda: target.events("click"))
    assert near(click, x, y)


def test_capture_returns_the_window_pixels(executor: WinExecutor, target: WinTarget) -> None:
    rect, canvas = grab(executor, target.canvas)
    assert rect == target.canvas
    bx, by = button_centre(target)
    cx, cy = int(bx) - target.canvas[0], int(by) - target.canvas[1]
    assert canvas.getpixel((cx - 50, cy)) == BUTTON_BLUE
    assert canvas.getpixel((BUTTON[2] + 40, BUTTON[1] + 20)) == (0xD6, 0x28, 0x28)  # circle
    assert canvas.getpixel((400, 250)) == (255, 255, 255)
    monitor_rect, monitor = grab(executor, PRIMARY)
    assert monitor_rect == list(PRIMARY)
    x, y, w, h = target.canvas
    assert monitor.crop((x, y, x + w, y + h)).tobytes() == canvas.tobytes()


# Pointer ------------------------------------------------------------------------------------

def test_click_by_pct_lands_on_that_pixel_once(executor: WinExecutor, target: WinTarget,
                                              tmp_path: Path) -> None:
    effects = tmp_path / "effects.jsonl"
    x, y = target.canvas[0] + 300, target.canvas[1] + 200
    outcome = executor.run(ON_PRIMARY, effects, type="click", target_spec=pct(PRIMARY, x, y))
    assert outcome["success"] and outcome["warning"] is None, outcome  # the dot drawn
    assert outcome["resolution_method"] == "position"
    assert outcome["actual_position"]["x"] == x and outcome["actual_position"]["y"] == y
    (click,) = wait_until(lambda: target.events("click"))
    assert near(click, x, y) and click["button"] == 1
    assert [e["action_id"] for e in read_effects(effects)] == ["a1"]


def test_click_by_anchor_lands_on_the_button(executor: WinExecutor,
                                            target: WinTarget) -> None:
    outcome = executor.run(ON_PRIMARY, type="click",
                           target_spec={"anchor_image_base64": anchor_of_button(executor,
                                                                                target)})
    assert outcome["success"], outcome
    assert outcome["resolution_method"] == "template_match"
    (click,) = wait_until(lambda: target.events("click"))
    assert near(click, *button_centre(target)), (click, button_centre(target))


# Keyboard -----------------------------------------------------------------------------------

def test_typing_ascii_and_accents_reaches_the_edit_control(executor: WinExecutor,
                                                          target: WinTarget) -> None:
    assert target.entry is not None
    field = pct(PRIMARY, target.entry[0] + 40, target.entry[1] + target.entry[3] / 2)
    assert executor.run(ON_PRIMARY, type="type", target_spec=field,
                        parameters={"text": "MOREL Catherine"})["success"]
    assert wait_until(lambda: [e["value"] for e in target.events("text")][-1:] ==
                      ["MOREL Catherine"])
    outcome = executor.run(ON_PRIMARY, type="type", target_spec=field,
                           parameters={"text": "Hélène Noël", "clear_first": True})
    assert outcome["success"], outcome
    assert wait_until(lambda: [e["value"] for e in target.events("text")][-1:] ==
                      ["Hélène Noël"])
    assert executor.run(ON_PRIMARY, type="key_combo", parameters={"keys": ["backspace"]})[
        "success"]
    assert wait_until(lambda: target.events("text")[-1]["value"] == "Hélène Noë")


def test_the_site_of_a_key_is_the_caret_of_the_focused_edit_control(
        executor: WinExecutor, target: WinTarget) -> None:
    """Where keyboard input went, as the report tells the loop detector: the
    caret of the focused EDIT control (GetGUIThreadInfo, read from the agent's process, its
    rcCaret mapped to the screen), checked against where the control's own thread puts its
    caret (GetCaretPos), within 2 px; the foreground window's rectangle; with no caret
    shown, the focused control's rectangle."""
    assert target.entry is not None
    field = pct(PRIMARY, target.entry[0] + 40, target.entry[1] + target.entry[3] / 2)
    assert executor.run(ON_PRIMARY, type="type", target_spec=field,
                        parameters={"text": "MOREL"})["success"]
    assert wait_until(lambda: [e["value"] for e in target.events("text")][-1:] == ["MOREL"])
    truth = target.send("caret")
    assert truth["caret"] is not None and truth["foreground"], truth
    outcome = executor.run(ON_PRIMARY, type="key_combo", parameters={"keys": ["end"]})
    assert outcome["success"], outcome
    assert target.send("caret")["caret"] == truth["caret"]  # "end" left it there

    def pixels(box: list[float]) -> tuple[float, float, float, float]:
        x, y, w, h = PRIMARY  # the action's area: fractions of it (ActionSite)
        return box[0] * w + x, box[1] * h + y, box[2] * w, box[3] * h

    fx, fy, fw, fh = pixels(outcome["site"]["focus"])
    assert abs(fx - truth["caret"][0]) <= 2 and abs(fy - truth["caret"][1]) <= 2, (
        outcome["site"], truth)
    ex, ey, ew, eh = truth["edit"]
    assert ex - 2 <= fx and fx + fw <= ex + ew + 2 and ey - 2 <= fy and fy + fh <= ey + eh + 2
    assert fw <= 4 and 8 <= fh <= eh  # a caret: a line of text high, not the control
    window = pixels(outcome["site"]["window"])
    assert all(abs(a - b) <= 2 for a, b in zip(window, truth["window"], strict=True)), (
        window, truth["window"])
    assert target.send("nocaret")["foreground"]  # the EDIT keeps the focus, shows no caret
    outcome = executor.run(ON_PRIMARY, type="key_combo", parameters={"keys": ["end"]})
    assert outcome["success"], outcome
    control = pixels(outcome["site"]["focus"])
    assert all(abs(a - b) <= 2 for a, b in zip(control, truth["edit"], strict=True)), (
        control, truth["edit"])


# The window in front (guards; fail closed) -----------------------------------------

def test_title_guard_passes_on_the_right_title_and_pauses_on_a_wrong_one(
        executor: WinExecutor, target: WinTarget) -> None:
    ok = executor.run(ON_PRIMARY, type="verify_screen", parameters={
        "expected_window_title_contains": ["dossier PATIENT"], "timeout_ms": 500})
    assert ok["success"] and ok["warning"] is None, ok
    started = time.monotonic()
    ko = executor.run(ON_PRIMARY, type="verify_screen", parameters={
        "expected_window_title_contains": ["Bloc-notes"], "timeout_ms": 200})
    assert time.monotonic() - started >= CONFIG["correction_timeout_s"]
    assert not ko["success"] and ko["needs_human"], ko
    assert ko["error"] == "window_title_mismatch"
    assert ko["warning"] == "setup_guard_window_mismatch"
    wrong = executor.run(ON_PRIMARY, type="click", expected_window_before="Bloc-notes",
                         target_spec={"x_pct": 0.3, "y_pct": 0.3})
    assert not wrong["success"] and wrong["warning"] == "wrong_window", wrong
    time.sleep(0.3)
    assert target.events("click") == []


@pytest.mark.parametrize("how", ["untitled", "no_window"])
def test_unknown_window_in_front_no_input_at_all(win_desk: WinDesk, executor: WinExecutor,
                                                 tmp_path: Path, how: str) -> None:
    """What the UAC secure desktop and the lock screen look like from the person's desktop:
    no foreground window, or one whose title cannot be read. Nothing is sent."""
    t = win_desk.target("Dossier patient", (300, 200, 640, 420))
    try:
        if how == "untitled":
            t.send("title ")
            expected = "untitled_foreground_window"
        else:
            t.send("hide")
            expected = "no_foreground_window"
        assert executor.ask(op="screen")["title"] is None
        effects = tmp_path / "effects.jsonl"
        field = pct(PRIMARY, t.canvas[0] + 40, t.canvas[1] + t.canvas[3] - 5)
        for action in ({"type": "click", "target_spec": pct(PRIMARY, t.canvas[0] + 300,
                                                             t.canvas[1] + 200)},
                       {"type": "type", "target_spec": field, "parameters": {"text": "x"}},
                       {"type": "key_combo", "parameters": {"keys": ["ctrl", "v"]}},
                       {"type": "scroll", "parameters": {"delta": -2}}):
            outcome = executor.run(ON_PRIMARY, effects, **action)
            assert not outcome["success"] and outcome["needs_human"], outcome
            assert outcome["error"] == f"system_dialog:{expected}"
            assert outcome["system_dialog"]["category"] == expected
        time.sleep(0.5)
        assert t.events("click") == [] and t.events("text") == []
        assert not effects.exists() or read_effects(effects) == []
    finally:
        t.close()


# Several monitors (QW1): DISPLAY2 is left of the primary, at x = -1280 ---------------------

def cover_monitors(win_desk: WinDesk) -> dict[int, WinTarget]:
    """A borderless window covering each monitor, each its own colour (idx: window)."""
    return {1: win_desk.target("Ecran gauche", LEFT, "--popup", "--no-edit", "--color",
                               "F0E0C0"),
            0: win_desk.target("Ecran principal", PRIMARY, "--popup", "--no-edit", "--color",
                               "C0E0F0")}


@pytest.fixture
def covers(win_desk: WinDesk, executor: WinExecutor) -> Iterator[dict[int, WinTarget]]:
    made = cover_monitors(win_desk)
    yield made
    for t in made.values():
        t.close()


def clicks_on_each_monitor(executor: WinExecutor, covers: dict[int, WinTarget],
                           last: tuple[float, float]) -> None:
    """Click by ``monitor_index`` (no monitor_resolution: the router had no heartbeat) on the
    left monitor, the primary, the left one again at ``last``; each within 2 px."""
    for idx, rect, (fx, fy) in ((1, LEFT, (0.25, 0.5)), (0, PRIMARY, (0.75, 0.25)),
                                (1, LEFT, last)):
        x, y = rect[0] + int(fx * rect[2]), rect[1] + int(fy * rect[3])
        before = len(covers[idx].events("click"))
        outcome = executor.run(None, type="click", monitor_index=idx,
                               target_spec={"x_pct": fx, "y_pct": fy})
        assert outcome["success"], outcome
        assert outcome["actual_position"]["x"] == x, outcome
        got = wait_until(lambda idx=idx, before=before:
                         len(covers[idx].events("click")) > before and
                         covers[idx].events("click"))[-1]
        assert near(got, x, y), (idx, got, (x, y))


COLOURS = {1: (0xF0, 0xE0, 0xC0), 0: (0xC0, 0xE0, 0xF0)}


def test_click_by_monitor_index_lands_on_each_monitor(executor: WinExecutor,
                                                     covers: dict[int, WinTarget]) -> None:
    """No monitor_resolution (the router had no heartbeat): the agent finds monitor_index
    among its own monitors, negative origin included."""
    clicks_on_each_monitor(executor, covers, (0.9, 0.1))
    assert len(covers[0].events("click")) == 1 and len(covers[1].events("click")) == 2


def test_capture_of_a_monitor_returns_that_monitor_only(executor: WinExecutor,
                                                       covers: dict[int, WinTarget]) -> None:
    for idx, rect in ((1, LEFT), (0, PRIMARY)):
        shot = executor.ask(op="grab_monitor", idx=idx)
        assert shot["rect"] == list(rect)
        image = Image.open(io.BytesIO(base64.b64decode(shot["png"]))).convert("RGB")
        assert image.size == rect[2:]
        colours = {c for _n, c in image.getcolors(1 << 20) or []}
        assert COLOURS[idx] in colours and COLOURS[1 - idx] not in colours, idx
        assert image.getpixel((rect[2] - 5, rect[3] - 5)) == COLOURS[idx]


# DPI: Wine's LogPixels, the same clicks (last: the prefix is restarted) --------------------

@pytest.fixture(scope="module")
def dpi_back_to_96(win_desk: WinDesk) -> Iterator[None]:
    """Once this module's DPI tests are done (each change restarts Wine's programs)."""
    yield
    win_desk.set_dpi(96)


@pytest.fixture
def at_dpi(win_desk: WinDesk, dpi_back_to_96: None, request: pytest.FixtureRequest) -> int:
    win_desk.set_dpi(request.param)
    return int(request.param)


@pytest.mark.parametrize("at_dpi", [120, 144], indirect=True)
def test_clicks_land_at_high_dpi(win_desk: WinDesk, at_dpi: int) -> None:
    executor = win_desk.executor(**CONFIG)
    assert executor.ready["awareness"] == 2
    # Wine has one DPI for every monitor (GetDpiForMonitor answers LogPixels for each, read
    # per-monitor aware): it cannot show a 100 % and a 150 % monitor side by side, so mixed
    # scales are tested in tests/unit/test_screen_dpi.py (docs/windows-scaling.md).
    scaling = executor.ready["dpi"]
    assert scaling["monitors"] == [[*PRIMARY, at_dpi], [*LEFT, at_dpi]], scaling
    assert scaling["system_dpi"] == at_dpi and scaling["refusal"] is None, scaling
    t = win_desk.target("Dossier patient", (300, 200, 640, 420))
    try:
        assert t.dpi == at_dpi  # the window is scaled: the setting took effect
        # Physical pixels on both sides: the monitors keep their size.
        assert [(m["x"], m["y"], m["w"], m["h"]) for m in executor.ready["monitors"]] == [
            PRIMARY, LEFT]
        clicks_at(executor, t, [(300, 200), (30, 20), (t.canvas[2] - 20, t.canvas[3] - 20)])
        outcome = executor.run(ON_PRIMARY, type="click",
                               target_spec={"anchor_image_base64": anchor_of_button(executor,
                                                                                    t)})
        assert outcome["success"] and outcome["resolution_method"] == "template_match", outcome
        got = wait_until(lambda: len(t.events("click")) == 4 and t.events("click"))[-1]
        assert near(got, *button_centre(t)), (got, button_centre(t))
    finally:
        t.close()
    # Both monitors, the left one at x = -1280, each covered by a window.
    made = cover_monitors(win_desk)
    try:
        clicks_on_each_monitor(executor, made, (0.9, 0.9))
    finally:
        for cover in made.values():
            cover.close()


@pytest.mark.parametrize("at_dpi", [144], indirect=True)
def test_an_unaware_agent_on_a_scaled_screen_does_not_click(win_desk: WinDesk,
                                                            at_dpi: int) -> None:
    """Fail closed: the executing thread DPI unaware at 150 % (Windows would scale its
    coordinates by 2/3: it sees the 1920x1080 monitor as 1280x720), as an agent whose
    per-monitor awareness Windows refused. No click, scroll or targeted typing is sent, the
    reason says which monitor and why, the replay pauses for a person; keys alone go."""
    executor = win_desk.executor(**CONFIG)
    made = cover_monitors(win_desk)
    try:
        with unaware(executor):
            seen = executor.ask(op="screen")
            assert [(m["w"], m["h"]) for m in seen["monitors"]] == [(1280, 720), (853, 683)]
            assert "1920x1080 at (0, 0) is at 150 %" in seen["dpi"]["refusal"], seen["dpi"]
            for action in ({"type": "click", "target_spec": {"x_pct": 0.5, "y_pct": 0.5}},
                           {"type": "double_click", "target_spec": {"x_pct": 0.2, "y_pct": 0.2}},
                           {"type": "scroll", "parameters": {"delta": -2}},
                           {"type": "type", "target_spec": {"x_pct": 0.5, "y_pct": 0.5},
                            "parameters": {"text": "x"}}):
                outcome = executor.run(ON_PRIMARY, **action)
                assert not outcome["success"] and outcome["needs_human"], outcome
                assert outcome["error"] == "display_scaling_mismatch", outcome
                assert "the agent is DPI unaware at 100 %" in outcome["target_description"]
            keys = executor.run(ON_PRIMARY, type="key_combo", parameters={"keys": ["shift"]})
            assert keys["success"], keys
        time.sleep(0.5)
        assert made[0].events("click") == [] and made[1].events("click") == []
        outcome = executor.run(None, type="click", monitor_index=1,
                               target_spec={"x_pct": 0.5, "y_pct": 0.5})
        assert outcome["success"], outcome  # per-monitor aware again: it clicks
        got = wait_until(lambda: made[1].events("click"))[-1]
        assert near(got, LEFT[0] + 640, 512), got
    finally:
        for cover in made.values():
            cover.close()

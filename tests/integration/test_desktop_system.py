"""The whole system on a real two-monitor X display: broker, dispatcher, monitor router and
an agent started with ``--executor desktop``, every one its own process.

The agent's heartbeats tell the router its monitors; a workflow step recorded on monitor 1
(0-based: the second screen, 1920x1080 at x=1280) is dispatched with that monitor's
``monitor_resolution``, and the agent clicks and types into a Tk window there
(tests/fixtures/click_target.py), which logs where each click landed.
"""

from __future__ import annotations

import base64
import io
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from messages.replay import ReplayResumed, ResumeReplay
from tests.click_window import BUTTON, Target
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import reports
from tests.integration.system import System, workflow
from tests.xdisplay import XDisplayFactory

MONITORS = [(1280, 1024, 0, 0), (1920, 1080, 1280, 0)]
PAUSED = "paused_need_help"

pytestmark = pytest.mark.timeout(180)


class Desk:
    def __init__(self, xdisplay: XDisplayFactory, spawn: Spawn, env: dict[str, str],
                 tmp: Path, correction_s: float, window_manager: bool = True) -> None:
        self.display = xdisplay(MONITORS, window_manager=window_manager)
        self.tmp = tmp
        # Guards may wait for a person: keep the watchdog from calling that an orphan.
        # On a busy machine the actors take seconds to import: patience at start.
        self.system = System(spawn, env, tmp, extra_env={"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60",
                                                         "LEA_BEACON_TIMEOUT_S": "30"},
                             ready_timeout=120)
        self.target = Target(self.display, tmp, "Dossier patient", 1580, 150)
        self.agent = spawn(python_argv(
            "-m", "agent", "--machine-id", "ws1", "--executor", "desktop", "--data-dir",
            str(tmp / "agent-data"), "--effects-log", str(tmp / "effects.jsonl")),
            env={**self.system.env, "DISPLAY": self.display,
                 "RPA_HUMAN_CORRECTION_TIMEOUT_S": str(correction_s)}, name="agent-ws1")
        # Its first hello answered: a replay started now is not re-sent by that hello.
        wait_until(lambda: any("dispatcher answered hello" in log.read_text(errors="replace")
                               for log in tmp.glob("agent-ws1-*.log")), timeout=60)

    def on_second(self, x: float, y: float) -> dict[str, Any]:
        return {"target_spec": {"x_pct": (x - 1280) / 1920, "y_pct": y / 1080},
                "monitor_index": 1}


@pytest.fixture
def desk(xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str],
         tmp_path: Path) -> Any:
    """The system, the display and the target window; the agent's correction timeout is 5 s."""
    d = Desk(xdisplay, spawn, lea_env, tmp_path, correction_s=5.0)
    yield d
    d.target.close()


def anchor_of_button(display: str, target: Target, monkeypatch: pytest.MonkeyPatch) -> str:
    from agent.screen.capture import Screen

    monkeypatch.setenv("DISPLAY", display)
    left, top, right, bottom = BUTTON
    screen = Screen()
    try:
        shot = screen.grab((target.canvas[0] + left - 6, target.canvas[1] + top - 6,
                            right - left + 12, bottom - top + 12))
    finally:
        screen.close()
    out = io.BytesIO()
    shot.image.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def test_clicks_and_typing_land_on_monitor_1_through_the_whole_system(
        desk: Desk, monkeypatch: pytest.MonkeyPatch) -> None:
    t = desk.target
    spot = (t.canvas[0] + 420, t.canvas[1] + 260)
    field = (t.entry[0] + 40, t.entry[1] + t.entry[3] / 2)
    wf = workflow(
        {"type": "click", **desk.on_second(*spot)},
        {"type": "click", "monitor_index": 1,
         "target_spec": {"anchor_image_base64": anchor_of_button(desk.display, t, monkeypatch)}},
        {"type": "type", **desk.on_second(*field),
         "parameters": {"text": "MOREL Catherine", "clear_first": True}},
    )
    rid = desk.system.start(wf, "ws1")
    desk.system.wait_status(rid, "completed", timeout=60)
    clicks = t.events("click")
    bx, by = t.button_centre()
    assert len(clicks) == 2, clicks  # the third click focuses the field (not the canvas)
    assert abs(clicks[0]["x"] - spot[0]) <= 2 and abs(clicks[0]["y"] - spot[1]) <= 2
    assert abs(clicks[1]["x"] - bx) <= 2 and abs(clicks[1]["y"] - by) <= 2
    assert wait_until(lambda: t.events("text") and
                      t.events("text")[-1]["value"] == "MOREL Catherine")
    logged = {r["action_id"]: r for r in reports(desk.system, rid)}
    assert logged["s1"]["body"]["resolution_method"] == "template_match"
    assert logged["s0"]["body"]["actual_position"]["x"] == pytest.approx(spot[0], abs=2)


def test_wrong_window_guard_pauses_then_a_correction_resumes(desk: Desk) -> None:
    """Nobody brings the window up: the replay pauses (needs_human). The person opens it
    and resumes: the guard passes. Then a guard whose window comes up while it waits ends
    with the warning and the correction, without a pause."""
    system = desk.system
    guard = {"type": "verify_screen",
             "parameters": {"expected_window_title_contains": ["Bloc-notes", "Notepad"],
                            "timeout_ms": 300, "_setup_phase": True}}
    rid = system.start(workflow(guard), "ws1")
    paused = system.wait_status(rid, PAUSED, "completed", timeout=60)
    assert paused.status == PAUSED, paused
    notepad = Target(desk.display, desk.tmp, "Bloc-notes - Sans titre", 200, 200)
    try:
        reply = system.call("dispatcher", ResumeReplay(replay_id=rid, operator="test"))
        assert isinstance(reply, ReplayResumed), reply
        system.wait_status(rid, "completed", timeout=60)
    finally:
        notepad.close()
    first = reports(system, rid)
    assert first[0]["body"]["needs_human"] and first[0]["error"] == "window_title_mismatch"

    opened: list[Target] = []

    def person_opens_it() -> None:
        time.sleep(2.0)
        opened.append(Target(desk.display, desk.tmp, "Calculatrice", 300, 300))

    helper = threading.Thread(target=person_opens_it)
    rid2 = system.start(workflow({**guard, "parameters": {
        **guard["parameters"], "expected_window_title_contains": ["Calculatrice"]}},
        workflow_id="wf2"), "ws1")
    helper.start()
    try:
        system.wait_status(rid2, "completed", timeout=60)
    finally:
        helper.join()
        for w in opened:
            w.close()
    (report,) = reports(system, rid2)
    assert report["warning"] == "setup_guard_window_mismatch" and report["success"]
    assert report["body"]["correction"]["corrected_title"] == "Calculatrice"


def test_a_window_unknown_after_a_click_pauses_before_the_next_step(desk: Desk) -> None:
    """The click closes its window and none comes up: the window the step expects was never
    seen. The click happened (done, never redone); the replay pauses before the next step
    and tells the person which window was expected."""
    desk.target.close()
    t = Target(desk.display, desk.tmp, "Dossier MOREL", 1580, 150, then=("", 0))
    try:
        rid = desk.system.start(workflow(
            {"type": "click", **desk.on_second(t.canvas[0] + 300, t.canvas[1] + 200),
             "expected_window_title": "Confirmation", "intention": "Valider le dossier"},
            {"type": "key_combo", "parameters": {"keys": ["enter"]}}), "ws1")
        paused = desk.system.wait_status(rid, PAUSED, "completed", timeout=60)
        assert (paused.status, paused.pause_reason) == (PAUSED, "wrong_window"), paused
        assert paused.pause_message == (
            "Léa n'est pas sur la bonne fenêtre (attendue : « Confirmation ») pour « Valider "
            "le dossier ». Affichez la bonne fenêtre, puis reprenez.")
        (report,) = reports(desk.system, rid)
        assert report["success"] and report["warning"] == "wrong_window", report
        assert "could not be read" in report["body"]["target_description"]
        assert len(t.events("click")) == 1
    finally:
        t.close()


def test_without_a_readable_active_window_no_input_and_the_replay_pauses(
        xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str],
        tmp_path: Path) -> None:
    """A display with no window manager and no focused named window: the agent cannot tell
    which window its input would reach (what the UAC secure desktop looks like on Windows).
    It sends nothing; the step reports a system dialog and the replay pauses for a person."""
    desk = Desk(xdisplay, spawn, lea_env, tmp_path, correction_s=5.0, window_manager=False)
    try:
        t = desk.target
        rid = desk.system.start(workflow(
            {"type": "click", **desk.on_second(t.canvas[0] + 300, t.canvas[1] + 200)},
            {"type": "type", **desk.on_second(t.entry[0] + 40, t.entry[1] + 10),
             "parameters": {"text": "MOREL"}}), "ws1")
        paused = desk.system.wait_status(rid, PAUSED, "completed", timeout=60)
        assert paused.status == PAUSED and paused.pause_reason == "system_dialog", paused
        (report,) = reports(desk.system, rid)
        assert report["error"] == "system_dialog:no_foreground_window", report
        assert report["body"]["needs_human"]
        assert report["body"]["system_dialog"]["category"] == "no_foreground_window"
        time.sleep(0.5)
        assert t.events("click") == [] and t.events("text") == []
        effects = tmp_path / "effects.jsonl"
        assert not effects.exists() or effects.read_text() == ""
    finally:
        t.close()

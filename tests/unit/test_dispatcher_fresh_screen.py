"""The safety checks' model judges a screen taken after the last person's action
(actors/dispatcher/machine/consult.py: screen_is_fresh), never one a person may have changed
since."""

from __future__ import annotations

from actors.dispatcher.machine.state import DispatcherConfig
from messages.safety_checks import BuildPausePayload, CaptureScreen, ScreenCaptured
from tests.unit.test_dispatcher_consult import answer, consults
from tests.unit.test_dispatcher_core import H, act, granted, wf

OLD = b"\x89PNG\r\n\x1a\nbefore the pause"
NEW = b"\x89PNG\r\n\x1a\nafter the resume"
CRITICAL = act("p2", "pause_for_human", safety_level="medical_critical")
CONFIG = DispatcherConfig(safety_checks=True, llm_enabled=True)


def test_after_a_resume_the_model_judges_a_capture_not_the_screen_before_the_pause() -> None:
    h = H(CONFIG)
    rid, _ = h.start(wf("s0", act("p1", "pause_for_human"), CRITICAL))
    h.report(rid, screenshot_after=OLD)
    (c,) = consults(h.decisions[-1])
    assert isinstance(c.message, BuildPausePayload)  # p1 (standard): no model, no capture
    answer(h, rid, None, "timeout")
    h.tick(30.0)  # the person works on the workstation during the pause
    (c,) = consults(h.resume(rid))
    assert isinstance(c.message, CaptureScreen) and c.message.action_id == "p2"
    (c,) = consults(answer(h, rid, ScreenCaptured(image=NEW, monitor_idx=0)))
    assert isinstance(c.message, BuildPausePayload) and c.message.last_screenshot == NEW


def test_a_capture_that_fails_after_a_resume_leaves_the_model_no_screen() -> None:
    h = H(CONFIG)
    rid, _ = h.start(wf("s0", act("p1", "pause_for_human"), CRITICAL))
    h.report(rid, screenshot_after=OLD)
    answer(h, rid, None, "timeout")
    h.tick(30.0)
    h.resume(rid)
    (c,) = consults(answer(h, rid, None, "timeout"))
    assert isinstance(c.message, BuildPausePayload) and c.message.last_screenshot is None


def test_a_step_in_flight_across_a_pause_leaves_no_fresh_screen() -> None:
    """Dispatched before a person's pause, reported after the resume: its screenshot may be
    older than what the person did."""
    h = H(CONFIG)
    rid, _ = h.start(wf("s0", CRITICAL))
    granted(h, rid)  # running when paused: it stays in flight (not granted: withdrawn)
    h.do(h.core.pause(rid, "operator", "stop", h.now))
    h.tick(30.0)
    h.resume(rid)
    h.tick(1.0)
    (c,) = consults(h.report(rid, screenshot_after=OLD))
    assert isinstance(c.message, CaptureScreen)


def test_a_step_dispatched_after_the_resume_leaves_a_fresh_screen() -> None:
    h = H(CONFIG)
    rid, _ = h.start(wf(act("p1", "pause_for_human"), "s1", CRITICAL))
    answer(h, rid, None, "timeout")
    h.tick(30.0)
    h.resume(rid)
    h.tick(1.0)
    (c,) = consults(h.report(rid, screenshot_after=NEW))
    assert isinstance(c.message, BuildPausePayload) and c.message.last_screenshot == NEW

"""The dispatcher core's consultations (route, payload, loop), claims and agent hellos."""

from __future__ import annotations

from dataclasses import replace

from actors.dispatcher.machine import steps
from actors.dispatcher.machine.consult import LOOP_DETECTED
from actors.dispatcher.machine.consult_inputs import MAX_PENDING_VERDICTS, VERDICT_PENDING
from actors.dispatcher.machine.decision import Consult, Decision, Notify, TrackInFlight
from actors.dispatcher.machine.state import DispatcherConfig
from actors.watchdog.core import WatchdogConfig, WatchdogCore
from messages import events
from messages.dispatch import (
    ActionProgress,
    AgentHello,
    ClaimAttempt,
    ClaimReply,
    DispatchAction,
)
from messages.loop import ForgetReplay, LoopVerdict, ObserveStep
from messages.monitor import MonitorResolution, ResolveMonitor
from messages.replay import Ack, PauseReplay, SafetyCheck
from messages.safety_checks import BuildPausePayload, CaptureScreen, PausePayload, ScreenCaptured
from tests.unit.test_dispatcher_core import H, act, audits, event, of, sent, topics, wf
from workflow.safety_rules import LLM_UNAVAILABLE_CHECK_ID

ALL = DispatcherConfig(loop_detector=True, agent_routes=True, safety_checks=True)
SCREEN2 = MonitorResolution(idx=1, offset_x=1920, offset_y=0, w=1280, h=1024, source="action")
PNG = b"\x89PNG\r\n\x1a\n..."
CHECKS = [{"id": "patient", "label": "Bon patient", "required": True},
          {"id": "dose", "label": "Bonne dose", "required": False}]


def consults(d: Decision) -> list[Consult]:
    return of(d, Consult)


def answer(h: H, rid: str, reply: object, error: str | None = None) -> Decision:
    """Answer the replay's oldest pending loop verdict, else its pending consultation."""
    r = h.replay(rid)
    token = r.loop_pending[0] if r.loop_pending else (
        r.awaiting.token if r.awaiting is not None else None)
    assert token is not None, f"{rid} awaits nothing"
    return h.do(h.core.consulted(rid, token, reply, error, h.now))  # type: ignore[arg-type]


def routing(h: H, rid: str) -> None:
    """Put the action in flight back to waiting for the monitor router, as a replay stored
    before the agents found their monitors themselves would be."""
    tx = h.core.book.begin(h.now)
    r = h.replay(rid)
    action = h.cur(rid).action
    steps.untrack(tx, r)
    steps.ask(tx, r, "route", action)
    h.do(tx.done(Ack(status="applied")))


def claim(h: H, rid: str) -> ClaimReply:
    """The agent claims the attempt in flight."""
    e = h.cur(rid)
    return claim_of(h, rid, DispatchAction.model_construct(action=e.action,
                                                           attempt_id=e.attempt_id))


def claim_of(h: H, rid: str, dispatch: DispatchAction) -> ClaimReply:
    """The agent claims ``dispatch``."""
    reply = h.core.claim(ClaimAttempt(replay_id=rid, machine_id="m1",
                                      action_id=dispatch.action.action_id,
                                      attempt_id=dispatch.attempt_id), "m1", h.now).reply
    assert isinstance(reply, ClaimReply)
    return reply


def test_a_screen_action_is_dispatched_at_once_and_the_agent_finds_its_monitor() -> None:
    h = H(DispatcherConfig(agent_routes=True))
    rid, d = h.start(wf(act("s1")))
    assert consults(d) == [] and h.replay(rid).awaiting is None
    (dispatch,) = sent(d)
    assert dispatch.agent_routes and dispatch.monitor_resolution is None
    assert event(d, events.ACTION_DISPATCHED)["monitor_resolution"] is None
    # A resend leaves it to the agent as well.
    (again,) = sent(h.resend(rid))
    assert again.agent_routes and again.attempt_id != dispatch.attempt_id
    # Without monitor routing, and for an action off the screen, the agent is not asked to.
    _, d = H(DispatcherConfig(agent_routes=False)).start(wf(act("s1")))
    assert not sent(d)[0].agent_routes
    _, d = h.start(wf(act("w", "wait")), machine="m2")
    assert not sent(d)[0].agent_routes


def test_the_monitor_an_agent_found_is_announced_as_the_router_announces_its_own() -> None:
    h = H(DispatcherConfig(agent_routes=True))
    rid, _ = h.start(wf(act("s1"), act("s2")))
    focus = SCREEN2.model_copy(update={"source": "focus",
                                       "reason": "recorded_monitor_unavailable"})
    d = h.report(rid, monitor_resolution=focus)
    routed = event(d, events.MONITOR_ROUTED)
    assert (routed["idx"], routed["source"], routed["by"]) == (1, "focus", "agent")
    assert routed["action_id"] == "s1" and routed["machine_id"] == "m1"
    assert event(d, events.MONITOR_UNAVAILABLE)["fallback"] == "focus"
    d = h.report(rid, monitor_resolution=SCREEN2)
    assert event(d, events.MONITOR_ROUTED)["source"] == "action"
    assert events.MONITOR_UNAVAILABLE not in topics(d)


def test_a_route_asked_before_the_agent_routed_is_asked_again_and_carried() -> None:
    """A replay stored while it waited for the router (before the agents found their
    monitors themselves) asks the router again at the start, and dispatches its answer."""
    h = H(DispatcherConfig(agent_routes=True))
    rid, _ = h.start(wf(act("s1"), act("s2")))
    h.report(rid)
    routing(h, rid)
    h2 = H(DispatcherConfig(agent_routes=True), state=h.core.state, first_id=100)
    (c,) = consults(h2.do(h2.core.recover(h2.now)))
    assert isinstance(c.message, ResolveMonitor) and c.message.action_id == "s2"
    d = h2.do(h2.core.consulted(rid, "not-the-token", SCREEN2, None, h2.now))
    assert d.reply == Ack(status="stale") and d.effects == [] and not d.changed
    (dispatch,) = sent(answer(h2, rid, SCREEN2))
    assert dispatch.monitor_resolution == SCREEN2 and not dispatch.agent_routes
    (again,) = sent(h2.resend(rid))
    assert again.monitor_resolution == SCREEN2 and not again.agent_routes


def test_pause_for_human_asks_safety_checks_then_pauses_with_its_checklist() -> None:
    h = H(DispatcherConfig(safety_checks=True))
    rid, d = h.start(wf(act("p", "pause_for_human", message="Vérifiez",
                            safety_level="medical_critical", safety_checks=CHECKS), "s2"))
    (c,) = consults(d)
    assert c.service == "safety_checks" and isinstance(c.message, BuildPausePayload)
    assert c.message.action.action_id == "p" and h.status(rid).status == "running"
    llm = SafetyCheck(id="llm_1", label="Allergie", required=False, source="llm_contextual",
                      evidence="bandeau rouge")
    payload = PausePayload(checks=[SafetyCheck(id="patient", label="Bon patient"), llm],
                           message="Vérifiez", llm_status="ok")
    d = answer(h, rid, payload)
    s = h.status(rid)
    assert (s.status, s.pause_reason, s.pause_message) == ("paused_need_help", "user_request",
                                                           "Vérifiez")
    assert [c.id for c in s.safety_checks] == ["patient", "llm_1"]
    assert h.resume(rid, ["llm_1"]).reply.detail["missing"] == ["patient"]  # type: ignore[attr-defined]
    assert sent(h.resume(rid, ["patient"]))[0].action.action_id == "s2"


def test_without_an_answer_the_declared_checks_are_used_and_closed_mode_adds_one() -> None:
    pause = act("p", "pause_for_human", safety_level="medical_critical", safety_checks=CHECKS)
    for closed, expected in ((False, ["patient", "dose"]),
                             (True, ["patient", "dose", LLM_UNAVAILABLE_CHECK_ID])):
        h = H(replace(ALL, loop_detector=False, llm_enabled=True, llm_fail_closed=closed))
        rid, _ = h.start(wf(pause))
        answer(h, rid, None, "timeout")  # the fresh capture (no screenshot yet): none either
        d = answer(h, rid, None, "timeout")
        assert [c.id for c in h.status(rid).safety_checks] == expected
        assert event(d, events.CONSULT_MISSED)["kind"] == "payload"
        assert event(d, events.SAFETY_CHECKS_LLM_FAILED)["cause"] == "safety_checks_unavailable"
        assert event(d, events.SAFETY_CHECKS_GENERATED)["count"] == len(expected)


def test_a_critical_pause_without_a_screenshot_asks_the_agent_for_one_first() -> None:
    pause = act("p", "pause_for_human", safety_level="medical_critical")
    h = H(DispatcherConfig(safety_checks=True, llm_enabled=True, llm_timeout_s=5.0))
    rid, d = h.start(wf(pause, "s1"))
    (c,) = consults(d)
    assert c.service == "agent.m1" and isinstance(c.message, CaptureScreen)
    assert c.timeout_s == 5.0 and h.status(rid).current_action_state == "awaiting_capture"
    h.tick(2.0)
    d = answer(h, rid, ScreenCaptured(image=PNG, monitor_idx=0))
    (c,) = consults(d)
    assert c.service == "safety_checks" and isinstance(c.message, BuildPausePayload)
    assert (c.message.last_screenshot, c.message.time_left_s) == (PNG, 3.0)


def test_no_capture_when_a_step_left_a_screenshot_or_the_model_is_off() -> None:
    pause = act("p", "pause_for_human", safety_level="medical_critical")
    h = H(DispatcherConfig(safety_checks=True, llm_enabled=True))
    rid, _ = h.start(wf("s0", pause))
    d = h.report(rid, screenshot_after=PNG)
    assert [type(c.message) for c in consults(d)] == [BuildPausePayload]
    h = H(DispatcherConfig(safety_checks=True, llm_enabled=False))
    _rid, d = h.start(wf(pause))
    assert [type(c.message) for c in consults(d)] == [BuildPausePayload]


def test_the_next_step_goes_at_once_and_its_input_waits_for_the_verdict() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    rid, _ = h.start(wf(act("s1"), act("s2")))
    d = h.report(rid, screenshot_after=PNG)
    (c,) = consults(d)
    assert isinstance(c.message, ObserveStep) and c.message.screenshot_after == PNG
    assert c.message.base_action_id == "s1"
    # Pipelined: s2 is dispatched with the report, but its click is not granted yet.
    assert [m.action.action_id for m in sent(d)] == ["s2"]
    assert claim(h, rid).reason == VERDICT_PENDING and claim(h, rid).retry_in_s
    assert h.status(rid).current_action_state == "awaiting_loop_verdict"
    d = answer(h, rid, LoopVerdict(detected=False))
    assert d.changed == set() and d.effects == []  # nothing to store, nothing to send
    assert claim(h, rid) == ClaimReply(granted=True)
    assert h.status(rid).current_action_state is None
    # The last report completes the replay: no verdict to wait for, the rings are freed.
    d = h.report(rid)
    assert h.status(rid).status == "completed" and consults(d) == []
    assert [type(n.message) for n in of(d, Notify)] == [ForgetReplay]


def test_a_loop_verdict_pauses_with_the_signal_and_its_evidence() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    rid, _ = h.start(wf("s1", "s2"))
    withdrawn = sent(h.report(rid))[0]
    d = answer(h, rid, LoopVerdict(detected=True, reason="same click", signal="action_repeat",
                                   evidence={"repeats": 3}))
    s = h.status(rid)
    assert (s.status, s.pause_reason) == ("paused_need_help", LOOP_DETECTED)
    assert s.pause_message == "Léa semble bloquée — action_repeat (repeats=3)"
    assert event(d, events.LOOP_DETECTED)["signal"] == "action_repeat"
    # The click dispatched meanwhile was never granted: taken back, it runs on resume.
    assert sent(d) == [] and s.current_action_id is None
    assert event(d, events.ACTION_WITHDRAWN)["attempt_id"] == withdrawn.attempt_id
    assert "action_withdrawn" in audits(d)
    assert claim_of(h, rid, withdrawn) == ClaimReply(granted=False, reason="not_current")
    (again,) = sent(h.resume(rid))
    assert again.action.action_id == "s2" and again.attempt_id != withdrawn.attempt_id
    assert claim(h, rid) == ClaimReply(granted=True)


def test_an_action_without_input_runs_ahead_of_the_verdicts_a_few_steps_at_most() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    steps = [act(f"w{i}", "wait") for i in range(MAX_PENDING_VERDICTS + 2)] + [act("c")]
    rid, _ = h.start(wf(*steps))
    for i in range(MAX_PENDING_VERDICTS):
        d = h.report(rid)  # no verdict answered yet: the next wait goes anyway
        assert [m.action.action_id for m in sent(d)] == [f"w{i + 1}"]
    d = h.report(rid)  # one step too far ahead: this one waits for a verdict
    assert sent(d) == [] and h.status(rid).current_action_state == "awaiting_loop"
    assert len(consults(d)) == 1
    for _ in range(MAX_PENDING_VERDICTS):
        assert sent(answer(h, rid, LoopVerdict(detected=False))) == []
    d = answer(h, rid, LoopVerdict(detected=False))
    assert [m.action.action_id for m in sent(d)] == [f"w{MAX_PENDING_VERDICTS + 1}"]
    # A loop verdict while a wait is in flight lets the wait finish (D8), then pauses.
    h.report(rid)
    assert h.cur(rid).action.action_id == "c"
    h2 = H(DispatcherConfig(loop_detector=True))
    rid2, _ = h2.start(wf(act("w0", "wait"), act("w1", "wait"), act("c")))
    h2.report(rid2)
    d = answer(h2, rid2, LoopVerdict(detected=True, reason="x", signal="screen_static"))
    assert h2.status(rid2).status == "paused_need_help"
    assert h2.cur(rid2).action.action_id == "w1" and events.ACTION_WITHDRAWN not in topics(d)


def test_a_screenshot_the_detector_cannot_read_is_left_out_not_fatal() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    rid, _ = h.start(wf("s1", "s2"))
    (c,) = consults(h.report(rid, screenshot_after=b"not an image"))
    assert isinstance(c.message, ObserveStep) and c.message.screenshot_after is None


def test_no_verdict_in_time_lets_the_replay_go_on_with_an_event() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    rid, _ = h.start(wf("s1", "s2"))
    assert [m.action.action_id for m in sent(h.report(rid))] == ["s2"]
    assert claim(h, rid).reason == VERDICT_PENDING
    d = answer(h, rid, None, "timeout")
    assert events.LOOP_CHECK_MISSED in topics(d) and h.status(rid).status == "running"
    assert claim(h, rid) == ClaimReply(granted=True)


def test_recovery_skips_a_lost_verdict() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    rid, _ = h.start(wf("s1", "s2"))
    h.report(rid)
    h2 = H(DispatcherConfig(loop_detector=True), state=h.core.state, first_id=100)
    assert [m.action.action_id for m in sent(h2.do(h2.core.recover(h2.now)))] == ["s2"]
    assert claim(h2, rid) == ClaimReply(granted=True)  # the lost verdict holds nothing


def test_cancel_while_waiting_purges_everything() -> None:
    h = H(ALL)
    rid, _ = h.start(wf("s1", "s2"))
    d = h.cancel(rid)
    assert h.replay(rid).awaiting is None and h.status(rid).queue_length == 0
    assert [type(n.message) for n in of(d, Notify)] == [ForgetReplay]


def test_only_the_attempt_in_flight_may_be_claimed() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    first = h.cur(rid).attempt_id

    def claim(attempt: str, machine: str = "m1", action: str = "s1") -> ClaimReply:
        reply = h.core.claim(ClaimAttempt(replay_id=rid, machine_id=machine, action_id=action,
                                          attempt_id=attempt), machine, h.now).reply
        assert isinstance(reply, ClaimReply)
        return reply

    assert claim(first).granted and h.cur(rid).claimed
    assert claim(first, machine="m2") == ClaimReply(granted=False, reason="wrong_machine")
    h.resend(rid)
    assert claim(first) == ClaimReply(granted=False, reason="not_current")
    assert claim(h.cur(rid).attempt_id).granted
    h.cancel(rid)
    assert not claim(first).granted


def test_a_hello_naming_the_attempt_it_holds_gets_no_copy() -> None:
    h = H()
    rid, _ = h.start(wf("s1"))
    held = h.cur(rid).attempt_id
    d = h.do(h.core.agent_hello(AgentHello(machine_id="m1", instance_id="i", pid=1,
                                           holding=[held]), h.now))
    assert sent(d) == [] and d.reply.detail == {"resent": [], "kept": ["s1"]}  # type: ignore[attr-defined]
    d = h.hello()
    assert [m.action.action_id for m in sent(d)] == ["s1"]


def test_a_pause_request_message_is_still_answered_while_waiting() -> None:
    h = H(ALL)
    rid, _ = h.start(wf("s1"))
    d = h.do(h.core.pause(rid, "operator", "stop", h.now))
    assert isinstance(d.reply, Ack) and PauseReplay  # the core's answer, no consultation left
    assert h.replay(rid).awaiting is None


def test_an_action_waiting_for_a_person_gets_the_watchdogs_patience() -> None:
    h = H()
    rid, _ = h.start(wf(act("g", "verify_screen"), "s2"))
    e = h.cur(rid)

    def progress(attempt: str, machine: str = "m1") -> Decision:
        return h.do(h.core.progress(ActionProgress(
            replay_id=rid, machine_id=machine, action_id="g", attempt_id=attempt,
            state="awaiting_human_correction", hold_s=150.0), machine, h.now))

    d = progress(e.attempt_id)
    (track,) = of(d, TrackInFlight)
    assert track.entry.patience_s == 150.0 and track.entry.attempt_id == e.attempt_id
    assert h.status(rid).current_action_state == "awaiting_human_correction"
    assert event(d, events.ACTION_PROGRESS)["hold_s"] == 150.0
    assert progress("old").reply == Ack(status="stale")
    assert progress(e.attempt_id, machine="m2").reply.code == "wrong_machine"  # type: ignore[attr-defined]
    watchdog = WatchdogCore(WatchdogConfig(orphan_timeout_s=45.0))
    watchdog.track(track.entry, now=0.0)
    assert watchdog.scan(now=100.0) == []  # within 45 + 150 s
    assert len(watchdog.scan(now=196.0)) == 1


def test_the_detector_counts_retries_run_so_the_dispatchers_pause_comes_first() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    rid, _ = h.start(wf("s1", "s2"))
    counts = []
    for _ in range(3):
        (c,) = consults(h.report(rid, success=False, error="target_not_found"))
        assert isinstance(c.message, ObserveStep)
        counts.append(c.message.retry_count)
    assert counts == [0, 1, 2]
    d = h.report(rid, success=False, error="target_not_found")  # s1_retry3 fails
    assert consults(d) == [] and h.status(rid).pause_reason == "target_not_found"

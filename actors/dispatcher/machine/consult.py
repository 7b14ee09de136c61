"""What the dispatcher asks the other actors on a replay's way, and what it makes of the answers.

Three consultations hold a replay (``ReplayState.awaiting``) until answered or timed out:

- ``route``: before a screen action is dispatched, the monitor router says on which monitor
  (docs/screens-and-pauses.md); no answer in time → the composite, as an agent without
  geometry would do.
- ``payload``: at a pause_for_human, the safety_checks actor builds the checklist
  (docs/screens-and-pauses.md); no answer → the declared checks, built here by the same
  function it uses.
- ``loop``: after a report, the loop detector's verdict (docs/screens-and-pauses.md); no
  answer → the replay goes on (the miss is an event). Pipelined: the next step is dispatched
  meanwhile and only its input waits for the verdict (consult_inputs.py); sent in batches
  (actors/dispatcher/loop_batch.py).

An answer names its consultation by token: one that arrives after the replay moved on (a
pause, a cancel, a restart that asked again) is stale and changes nothing. The functions
here are pure; the core (actors/dispatcher/core.py) applies them.
"""

from __future__ import annotations

from typing import Any

from actors.dispatcher.machine import rules
from actors.dispatcher.machine.state import DispatcherConfig, InFlightEntry, ReplayState
from messages.base import Message
from messages.dispatch import ActionReport
from messages.loop import IMAGE_MAGIC, LOOP_DETECTED, LoopVerdict, ObserveStep
from messages.monitor import COMPOSITE, MonitorResolution, ResolveMonitor
from messages.replay import SafetyCheck
from messages.safety_checks import (
    BuildPausePayload,
    CaptureScreen,
    PausePayload,
    RecentStep,
    ReplayContext,
    ScreenCaptured,
)
from messages.workflow import Action
from workflow.safety_rules import llm_unavailable_check, pause_checks, safety_level

RECENT_STEPS = 5
"""Steps already resolved that the safety checks' model sees as context."""


def consult_request(r: ReplayState, time_left_s: float | None = None) -> Message:
    """The request of ``r``'s pending route, capture or payload consultation
    (``time_left_s``: of the model's deadline, after a capture)."""
    a = r.awaiting
    if a is None or a.action is None:
        raise ValueError(f"replay {r.replay_id} awaits no route, capture or payload")
    if a.kind == "route":
        return ResolveMonitor(machine_id=r.machine_id, action_id=a.action.action_id,
                              action_type=a.action.type, monitor_index=a.action.monitor_index,
                              monitor_geometry=a.action.monitor_geometry,
                              replay_id=r.replay_id, session_id=r.session_id)
    if a.kind == "capture":
        return CaptureScreen(replay_id=r.replay_id, action_id=a.action.action_id,
                             monitor_index=a.action.monitor_index,
                             monitor_geometry=a.action.monitor_geometry)
    return BuildPausePayload(
        replay_id=r.replay_id, session_id=r.session_id, machine_id=r.machine_id, mode=r.mode,
        action=a.action, last_screenshot=r.last_screenshot if screen_is_fresh(r) else None,
        time_left_s=time_left_s,
        context=ReplayContext(
            workflow_id=r.workflow.workflow_id, workflow_name=r.workflow.name or "",
            index=r.index, total=r.total, recent_steps=_recent(r)))


def wants_capture(r: ReplayState, action: Action, config: DispatcherConfig) -> bool:
    """Whether to ask the agent for a fresh capture before the checklist: the model will be
    asked (medical_critical, model on) and no screenshot shows the screen since the last
    person's action (:func:`screen_is_fresh`)."""
    return (not screen_is_fresh(r) and config.llm_enabled
            and safety_level(action) == "medical_critical")


def person_acted_at(r: ReplayState) -> float:
    """When a person last had the workstation's screen: the last resume (during a pause
    the person works on the screen), else the replay's start."""
    ack = r.checks_acknowledged
    at = ack.get("at") if ack else None
    return float(at) if isinstance(at, int | float) else r.created_at


def screen_is_fresh(r: ReplayState) -> bool:
    """Whether the last screenshot was taken after the last person's action: only such a
    screen may be judged by the safety checks' model (docs/screens-and-pauses.md); an
    older one may show what the person has changed since."""
    return (r.last_screenshot is not None and r.last_screenshot_at is not None
            and r.last_screenshot_at >= person_acted_at(r))


def keep_screenshot(r: ReplayState, entry: InFlightEntry, report: ActionReport) -> None:
    """Keep an accepted report's screenshot. It was taken no earlier than the step's first
    dispatch: a step dispatched before a pause and reported after the resume is older than
    the person's work, and not fresh."""
    shot = report.screenshot_after or report.screenshot_before
    if shot:
        r.last_screenshot, r.last_screenshot_at = shot, entry.first_dispatched_at


def keep_capture(r: ReplayState, image: bytes | None, asked_at: float) -> None:
    """Keep a capture the agent answered with (taken after it was asked); none keeps the
    old screenshot, which the model is then not given if stale."""
    if image:
        r.last_screenshot, r.last_screenshot_at = image, asked_at


def captured(answer: Message | None) -> bytes | None:
    """The image a capture answered with, if it is one (PNG or JPEG)."""
    if isinstance(answer, ScreenCaptured) and answer.image and answer.image.startswith(
            IMAGE_MAGIC):
        return answer.image
    return None


def _recent(r: ReplayState) -> list[RecentStep]:
    done = r.workflow.actions[max(0, r.cursor - 1 - RECENT_STEPS):max(0, r.cursor - 1)]
    return [RecentStep(action_id=a.action_id, type=a.type, intention=a.intention)
            for a in done]


def observe_request(r: ReplayState, entry: InFlightEntry, report: ActionReport) -> ObserveStep:
    """What the loop detector sees of one accepted report."""
    action = entry.action
    base = rules.base_id(action.action_id)
    return ObserveStep(
        replay_id=r.replay_id, session_id=r.session_id, action_id=action.action_id,
        base_action_id=base, action_type=action.type,
        target=action.target_spec.model_dump(mode="json") if action.target_spec else None,
        parameters=dict(action.parameters), success=report.success, error=report.error,
        warning=report.warning, retry_count=_retries_done(r, base, report.success),
        actual_position=report.actual_position, site=report.site,
        screenshot_after=_image(report.screenshot_after))


def _retries_done(r: ReplayState, base: str, success: bool) -> int:
    """Retries of the step run since its last resume, the one just reported included.

    A failure consulted about has just had its next retry scheduled (the budget counts it):
    that one has not run. So with the defaults (3 and 3) the detector's retry_threshold
    would fire on the report of the third retry, where the dispatcher has already paused
    with the more precise target_not_found (docs/architecture.md); it is the safety net of a
    larger MAX_RETRIES_PER_ACTION.
    """
    scheduled = r.retry_budget.get(base, 0)
    return scheduled if success else max(0, scheduled - 1)


def _image(data: bytes | None) -> bytes | None:
    """A screenshot the detector can read; anything else is left out (signal A then has
    nothing to compare, B and C still work) rather than refused with the whole step."""
    return data if data is not None and data.startswith(IMAGE_MAGIC) else None


def resolution(answer: Message | None) -> dict[str, Any]:
    """The monitor resolution to dispatch with: the router's, else the composite (the
    event CONSULT_MISSED carries the error)."""
    if isinstance(answer, MonitorResolution):
        return answer.model_dump(mode="json")
    why = "router_unavailable" if answer is None else "router_refused"
    return COMPOSITE.model_copy(update={"reason": why}).model_dump(mode="json")


def pause_payload(answer: Message | None, action: Action, config: DispatcherConfig,
                  ) -> tuple[rules.PauseCause, list[SafetyCheck]]:
    """The pause at a pause_for_human: the safety_checks actor's payload, or the fallback.

    The fallback is what that actor would answer with no model: the declared checks; with
    ``RPA_SAFETY_CHECKS_LLM_FAIL_MODE=closed`` and a model expected, the same required
    check it adds when the model fails.
    """
    if isinstance(answer, PausePayload):
        detail = {"safety_level": answer.safety_level, "llm_status": answer.llm_status,
                  "llm": None if answer.llm is None else answer.llm.model_dump(mode="json"),
                  "checks": len(answer.checks), "source": "safety_checks"}
        return rules.PauseCause(answer.pause_reason, answer.message, detail), answer.checks
    checks = pause_checks(action)
    if (config.llm_enabled and config.llm_fail_closed
            and safety_level(action) == "medical_critical"):
        checks.append(llm_unavailable_check("safety_checks_unavailable"))
    cause = rules.human_pause(action, checks)
    cause.detail["source"] = "dispatcher_fallback"
    return cause, checks


def loop_pause(answer: Message | None) -> rules.PauseCause | None:
    """The pause a loop verdict asks for, if any."""
    if not isinstance(answer, LoopVerdict) or not answer.detected:
        return None
    return rules.PauseCause(LOOP_DETECTED, answer.pause_message(), {
        "signal": answer.signal, "reason": answer.reason, "evidence": answer.evidence})

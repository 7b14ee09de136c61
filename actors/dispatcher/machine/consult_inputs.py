"""The answers of the actors the dispatcher consults, and the loop verdicts it does not wait for.

Plain functions of the decision's :class:`~actors.dispatcher.machine.book.Tx` (same pure rules:
one input and the time in, a Decision out); :class:`~actors.dispatcher.core.DispatcherCore`
calls them.

Loop verdicts are *pipelined*. After an accepted report the step is shown to the loop
detector and the next action is dispatched at once, without waiting for the verdict: the
detector's round trip stays off the path of every step. What a verdict must stop is input
to the workstation, and every input action is claimed by the agent before it runs
(agent_inputs.claim): while a verdict is pending the claim is held and answered when it
comes (actors/dispatcher/held_claims.py, a few at a time), else answered "not yet"
(:data:`VERDICT_PENDING`, ``retry_in_s``) and the agent asks again. A
verdict that says "loop" pauses the replay, and the pause withdraws the action in flight
if it is an input action, which was then never granted: it goes back to the head of the
queue and runs on resume (steps.withdraw). An action without input (``wait``,
``verify_screen``...) dispatched meanwhile is let finish, as any action in flight at a
pause (D8). So no click, typing, key or scroll happens after a step the detector judges a
loop, exactly as when the dispatcher waited; and at most :data:`MAX_PENDING_VERDICTS` steps
are ahead of their verdicts (beyond that, the replay waits for one, ``awaiting_loop``).
"""

from __future__ import annotations

from actors.dispatcher.machine import consult, steps
from actors.dispatcher.machine.book import Tx, who
from actors.dispatcher.machine.decision import Consult, Decision
from actors.dispatcher.machine.state import Awaiting, InFlightEntry, ReplayState
from messages import events
from messages.base import Message
from messages.dispatch import ActionReport
from messages.replay import Ack

MAX_PENDING_VERDICTS = 4
"""Steps a replay may run ahead of their loop verdicts (only actions without input can)."""
VERDICT_PENDING = "verdict_pending"
"""A claim's answer while a loop verdict is pending: not refused, ask again."""
CLAIM_RETRY_S = 0.001
"""... after this long, twice as long each time (the agent's side). A verdict takes about a
broker round trip, a GUI action hundreds of milliseconds; the claim of a step dispatched at
once (its monitor found by the agent, steps.dispatch) often comes while its predecessor's
verdict is a fraction of a round trip away: asking again soon costs a claim, later a step."""


def observe(tx: Tx, r: ReplayState, entry: InFlightEntry, report: ActionReport) -> None:
    """Show an accepted report to the loop detector; the caller goes on at once, unless this
    made the replay wait (too far ahead of the verdicts already asked)."""
    step = consult.observe_request(r, entry, report)
    if len(r.loop_pending) >= MAX_PENDING_VERDICTS:
        steps.ask(tx, r, "loop", None, step)
        return
    token = tx.book.new_id()
    r.loop_pending.append(token)
    tx.effects.append(Consult("loop_detector", r.replay_id, token, step,
                              tx.config.loop_timeout_s))


def consulted(tx: Tx, replay_id: str, token: str, answer: Message | None,
              error: str | None) -> Decision:
    """Another actor answered (or did not, ``answer`` None) a replay's consultation."""
    r = tx.book.replays.get(replay_id)
    if r is not None and token in r.loop_pending:
        return _verdict(tx, r, token, answer, error)
    a = r.awaiting if r is not None else None
    if r is None or a is None or a.token != token:
        return Decision(Ack(status="stale"))
    r.awaiting = None
    tx.touch(r)
    if a.kind == "route" and a.action is not None:
        steps.dispatch_now(tx, r, a.action, consult.resolution(answer))
    elif a.kind == "capture" and a.action is not None:
        # No image (an agent that cannot capture, or too slow): the payload is asked all
        # the same; the model is then not called (no_screenshot) and says so.
        consult.keep_capture(r, consult.captured(answer), a.since)
        left = max(0.0, tx.config.llm_timeout_s - (tx.now - a.since))
        r.awaiting = Awaiting("payload", tx.book.new_id(), tx.now, a.action)
        steps.ask(tx, r, "payload", a.action, consult.consult_request(r, time_left_s=left))
    elif a.kind == "payload" and a.action is not None:
        human, checks = consult.pause_payload(answer, a.action, tx.config)
        steps.pause(tx, r, human, a.action, checks=checks, counts_step=True)
    elif not _loop_paused(tx, r, answer, error):
        steps.advance(tx, r)
    if answer is None and a.kind != "loop":
        tx.event(events.CONSULT_MISSED, **who(r), kind=a.kind, error=error)
    if answer is None and a.kind == "payload" and r.pause is not None:
        # The actor that says these did not answer: the dispatcher says them.
        ids = {"action_id": r.pause.action_id, **who(r)}
        tx.event(events.SAFETY_CHECKS_LLM_FAILED, **ids, cause="safety_checks_unavailable",
                 detail=error)
        tx.event(events.SAFETY_CHECKS_GENERATED, **ids, count=len(r.pause.safety_checks),
                 sources=[c.source for c in r.pause.safety_checks])
    return tx.done(Ack(status="applied"))


def _verdict(tx: Tx, r: ReplayState, token: str, answer: Message | None,
             error: str | None) -> Decision:
    """A pipelined loop verdict: nothing to do unless it says "loop" (then pause, which
    withdraws an input action in flight: its claim was held, it never ran)."""
    r.loop_pending.remove(token)
    _loop_paused(tx, r, answer, error)
    return tx.done(Ack(status="applied"))


def _loop_paused(tx: Tx, r: ReplayState, answer: Message | None, error: str | None) -> bool:
    """Pause ``r`` if the verdict says so (True); an unanswered check is an event."""
    loop = consult.loop_pause(answer)
    if loop is not None and r.status == "running":
        tx.event(events.LOOP_DETECTED, **who(r), **loop.detail)
        steps.pause(tx, r, loop, None)
        return True
    if answer is None:
        tx.event(events.LOOP_CHECK_MISSED, **who(r), error=error)
    return False


def claim_waits(r: ReplayState) -> bool:
    """Whether ``r``'s input must wait: a loop verdict on an earlier step is pending."""
    return bool(r.loop_pending)

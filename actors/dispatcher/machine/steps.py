"""The small steps every input of the dispatcher core is made of.

Dispatch, resend, pause, complete, purge: each takes the decision's :class:`Tx` (and through
it the :class:`~actors.dispatcher.machine.book.ReplayBook`) and the replay it changes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from actors.dispatcher.machine import consult, rules
from actors.dispatcher.machine.book import Tx, who
from actors.dispatcher.machine.decision import (
    Consult,
    Notify,
    SendToAgent,
    TrackInFlight,
    UntrackInFlight,
)
from actors.dispatcher.machine.state import (
    PAUSED,
    Awaiting,
    DispatcherConfig,
    InFlightEntry,
    PauseInfo,
    ReplayState,
)
from messages import events
from messages.base import Message
from messages.dispatch import DispatchAction
from messages.loop import ForgetReplay
from messages.monitor import MonitorResolution
from messages.pause import AgentPaused
from messages.replay import SafetyCheck
from messages.workflow import INPUT_TYPES, SCREEN_TYPES, Action
from workflow.outputs import used
from workflow.safety_rules import pause_checks

ConsultKind = Literal["loop", "route", "capture", "payload"]


def advance(tx: Tx, r: ReplayState) -> None:
    """Dispatch the next action if the replay runs, owns its session and has none in flight
    (nor waits for another actor's answer)."""
    while (r.status == "running" and r.inflight is None and r.awaiting is None
           and tx.book.owner(r.session_id) is r):
        head = r.pop_head()
        tx.touch(r)
        if head is None:
            complete(tx, r)
            return
        missing = [n for n in used(head) if n not in r.outputs]
        if missing:
            # Never dispatched with an empty value (docs/protocol.md, "Outputs"): it waits
            # at the head of the queue, and the person is told why.
            r.inserted.insert(0, head)
            pause(tx, r, rules.output_missing_pause(r.shown(head), missing), head)
            return
        if head.type != "pause_for_human":
            dispatch(tx, r, head)
            return
        head = r.shown(head)  # its message and check labels, with the run's values
        checks = pause_checks(head)
        if r.mode == "supervised" or checks:
            pause_for_human(tx, r, head, checks)
            return
        # Autonomous mode: a pause_for_human without checks is skipped (a medical_critical
        # one always has a required check: workflow.safety_rules.pause_checks).
        r.index += 1
        r.completed_actions += 1  # resolved: progress reaches total on completion
        r.bump("skipped")
        info = {**who(r, head.action_id), "reason": "autonomous_mode"}
        tx.event(events.ACTION_ACKED, **info, outcome="skipped")
        tx.audit("action_skipped", **info)


def advance_session(tx: Tx, session_id: str) -> None:
    """Let the session's owner go on (its previous owner finished)."""
    owner = tx.book.owner(session_id)
    if owner is not None:
        advance(tx, owner)


def pause_for_human(tx: Tx, r: ReplayState, action: Action, checks: list[SafetyCheck]) -> None:
    """Pause at a pause_for_human, with the checklist the safety_checks actor builds; first a
    fresh capture from the agent if the model will want a screen and no step left one
    (consult.wants_capture)."""
    if tx.config.safety_checks and consult.wants_capture(r, action, tx.config):
        ask(tx, r, "capture", action)
    elif tx.config.safety_checks:
        ask(tx, r, "payload", action)
    else:
        pause(tx, r, rules.human_pause(action, checks), action, checks=checks,
              counts_step=True)


def ask(tx: Tx, r: ReplayState, kind: ConsultKind, action: Action | None,
        message: Message | None = None) -> None:
    """Wait for another actor's answer before the replay's next step (consult.py)."""
    r.awaiting = Awaiting(kind, tx.book.new_id(), tx.now, action)
    tx.touch(r)
    request = message if message is not None else consult.consult_request(r)
    c = tx.config
    service, timeout = {
        "loop": ("loop_detector", c.loop_timeout_s),
        "route": ("monitor_router", c.route_timeout_s),
        "capture": (f"agent.{r.machine_id}", c.llm_timeout_s),
        "payload": ("safety_checks", c.payload_timeout_s)}[kind]
    tx.effects.append(Consult(service, r.replay_id, r.awaiting.token, request, timeout))


def drop_awaiting(r: ReplayState) -> None:
    """Stop waiting (a pause or the end came first); an action taken off the queue for it
    goes back to the head, and its answer, when it comes, is stale; so are the loop verdicts
    still pending."""
    a, r.awaiting = r.awaiting, None
    r.loop_pending.clear()
    if a is not None and a.action is not None and r.active:
        r.inserted.insert(0, a.action)


def dispatch(tx: Tx, r: ReplayState, action: Action) -> None:
    """Dispatch ``action`` at once: a screen action's monitor is found by the agent, with the
    monitor router's rule, on its screen as it is at the moment of the action
    (:func:`agent_routes`); the router is not asked on the way."""
    dispatch_now(tx, r, action, None)


def agent_routes(config: DispatcherConfig, e: InFlightEntry) -> bool:
    """Whether the agent finds the monitor of the attempt in flight itself: monitor routing on,
    a screen action, no router answer held (one asked before this rule, kept in flight
    across an upgrade, is sent as it was). The router's answer follows the agent's own
    heartbeats, at most a heartbeat old: the agent reads the same screen fresher, so no
    stale resolution ever picks the monitor (docs/screens-and-pauses.md)."""
    return (config.agent_routes and e.action.type in SCREEN_TYPES
            and e.monitor_resolution is None)


def dispatch_now(tx: Tx, r: ReplayState, action: Action,
                 resolution: dict[str, Any] | None) -> None:
    """A first attempt of ``action``, on the monitor ``resolution`` names (if any)."""
    r.inflight = InFlightEntry(action=action, attempt_id=tx.book.new_id(),
                               machine_id=r.machine_id, first_dispatched_at=tx.now,
                               dispatched_at=tx.now, monitor_resolution=resolution)
    r.bump("dispatched")
    send(tx, r)


def redispatch(tx: Tx, r: ReplayState, reason: str, *, orphan: bool) -> None:
    """Same action_id, new attempt_id; only watchdog resends use the watchdog's budget."""
    old = r.inflight
    if old is None:
        raise ValueError(f"replay {r.replay_id} has nothing in flight")
    untrack(tx, r)
    r.inflight = replace(old, attempt_id=tx.book.new_id(), dispatched_at=tx.now,
                         resent_count=old.resent_count + 1, last_resent_at=tx.now,
                         resend_reason=reason,
                         orphan_resends=old.orphan_resends + (1 if orphan else 0))
    r.bump("resent")
    send(tx, r)


def send(tx: Tx, r: ReplayState) -> None:
    """Track the attempt in flight with the watchdog, then send it to the agent."""
    e = r.inflight
    if e is None:
        raise ValueError(f"replay {r.replay_id} has nothing in flight")
    tx.book.bind_attempt(r)
    tx.touch(r)
    # Track before sending: a report can then never beat the watchdog's entry.
    tx.effects.append(TrackInFlight(r.tracked()))
    # Every copy carries the ids it redoes: any of them may be the one the agent gets.
    supersedes = r.supersedes.get(e.action.action_id, [])
    resolution = (None if e.monitor_resolution is None
                  else MonitorResolution.model_validate(e.monitor_resolution))
    tx.effects.append(SendToAgent(e.machine_id, DispatchAction(
        replay_id=r.replay_id, session_id=r.session_id, machine_id=e.machine_id,
        action=r.concrete(e.action), attempt_id=e.attempt_id, dispatch_meta=e.meta(),
        monitor_resolution=resolution, agent_routes=agent_routes(tx.config, e),
        supersedes=list(supersedes))))
    info = {**who(r, e.action.action_id), "attempt_id": e.attempt_id,
            "action_type": e.action.type, "resent_count": e.resent_count,
            "resend_reason": e.resend_reason, "monitor_resolution": e.monitor_resolution}
    if supersedes:
        info["supersedes"] = list(supersedes)
    tx.event(events.ACTION_DISPATCHED, **info)
    tx.audit("action_resent" if e.resent_count else "action_dispatched", **info)


def untrack(tx: Tx, r: ReplayState) -> None:
    """Nothing in flight any more for ``r``: the watchdog stops timing it."""
    e = r.inflight
    if e is None:
        return
    r.inflight = None
    tx.book.unbind_attempt(e.attempt_id)
    tx.touch(r)
    tx.effects.append(UntrackInFlight(e.action.action_id, e.attempt_id))


def purge(tx: Tx, r: ReplayState) -> None:
    """D4 / I4: no queue and nothing in flight once a replay is finished."""
    untrack(tx, r)
    r.awaiting = None
    r.loop_pending.clear()
    r.clear_queue()
    r.last_screenshot = None
    tx.touch(r)
    if tx.config.loop_detector:
        tx.effects.append(Notify("loop_detector", ForgetReplay(replay_id=r.replay_id)))


def complete(tx: Tx, r: ReplayState) -> None:
    """The last step is done: the replay is completed and its session goes on."""
    purge(tx, r)
    r.status = "completed"
    info = {**who(r), "completed_actions": r.completed_actions, "total": r.total,
            "counters": dict(r.counters), **({"outputs": r.shown_outputs()} if r.outputs else {})}
    tx.event(events.REPLAY_COMPLETED, **info)
    tx.audit("replay_completed", **info)
    advance_session(tx, r.session_id)


def pause(tx: Tx, r: ReplayState, cause: rules.PauseCause, action: Action | None, *,
          failed: Action | None = None, checks: list[SafetyCheck] | None = None,
          counts_step: bool = False) -> None:
    """paused_need_help; a second cause while paused keeps the first one's checks."""
    old = r.pause
    all_checks = list(old.safety_checks) if old else []
    all_checks += [c for c in checks or [] if c.id not in {o.id for o in all_checks}]
    r.pause = PauseInfo(
        reason=cause.reason, message=cause.message, at=tx.now,
        action_id=action.action_id if action else (old.action_id if old else None),
        failed_action=failed or (old.failed_action if old else None),
        counts_step=counts_step or (old.counts_step if old else False),
        safety_checks=all_checks, detail=cause.detail)
    drop_awaiting(r)
    withdraw(tx, r, cause.reason)
    r.status = PAUSED
    r.bump("pauses")
    tx.touch(r)
    info = {**who(r, r.pause.action_id), "reason": cause.reason, "message": cause.message,
            "detail": cause.detail, "resume_action": failed.action_id if failed else None,
            "safety_checks": [c.model_dump(mode="json") for c in all_checks]}
    tx.event(events.REPLAY_PAUSED, **info)
    tx.audit("replay_paused", **info)
    notify_paused(tx, r)


def withdraw(tx: Tx, r: ReplayState, reason: str) -> None:
    """Take back the input action in flight if its claim was never granted: it has not run
    and, its attempt no longer current, never will (agent_inputs.claim). It goes back to the
    head of the queue and runs on resume. One granted runs to its end (D8)."""
    e = r.inflight
    if e is None or e.action.type not in INPUT_TYPES or e.claimed:
        return
    untrack(tx, r)
    r.inserted.insert(0, e.action)
    info = {**who(r, e.action.action_id), "attempt_id": e.attempt_id, "reason": reason}
    tx.event(events.ACTION_WITHDRAWN, **info)
    tx.audit("action_withdrawn", **info)


def notify_paused(tx: Tx, r: ReplayState) -> None:
    """Show the pause to the person at the workstation (messages/pause.py)."""
    p = r.pause
    if p is not None:
        # the paused step's monitor: a retry or inserted step, else the workflow's own
        monitor = next((a.monitor_index for a in (p.failed_action, *r.inserted,
                                                  *r.workflow.actions)
                        if a is not None and a.action_id == p.action_id), None)
        tx.effects.append(Notify(f"agent.{r.machine_id}", AgentPaused(
            replay_id=r.replay_id, reason=p.reason, message=p.message,
            action_id=p.action_id, monitor_index=monitor,
            safety_checks=list(p.safety_checks), paused_at=p.at)))

"""What people and the dispatcher's own start ask of the core: start, status, resume,
cancel, pause, and the recovery after a restart.

Plain functions of the decision's :class:`~actors.dispatcher.machine.book.Tx` (one input and the
time in, a Decision out); :class:`~actors.dispatcher.core.DispatcherCore` calls them.
"""

from __future__ import annotations

from typing import Any, Literal

from actors.dispatcher.machine import rules, steps
from actors.dispatcher.machine.book import ReplayBook, Tx, who
from actors.dispatcher.machine.decision import Decision, Notify
from actors.dispatcher.machine.state import PAUSED, ReplayState
from messages import events
from messages.control import ErrorReply
from messages.pause import AgentPauseEnded
from messages.replay import (
    Ack,
    CancelReplay,
    GetReplayStatus,
    ReplayCancelled,
    ReplayResumed,
    ReplayStarted,
    ReplayStatusReply,
    ResumeReplay,
    SafetyCheck,
    StartReplay,
)
from workflow.inputs import shown_values, value_problems
from workflow.safety_rules import with_confirmations
from workflow.setup_chain import with_setup


def start(tx: Tx, msg: StartReplay) -> Decision:
    """A new replay of ``msg.workflow``; dispatches its first action if the session is free."""
    r = open_replay(tx, msg)
    if isinstance(r, ErrorReply):
        return Decision(r)
    return tx.done(ReplayStarted(replay_id=r.replay_id, session_id=r.session_id,
                                 status=r.status))


def open_replay(tx: Tx, msg: StartReplay, **about: object) -> ReplayState | ErrorReply:
    """The replay ``msg`` asks for, started in ``tx``, or why it cannot be. ``about``: more
    for its start event and record (a work item's queue and reference)."""
    wrong = value_problems(msg.workflow.inputs, msg.inputs)
    if wrong:  # before anything exists: no replay, nothing dispatched
        return ErrorReply(code="invalid_inputs", message=(
            "the input values do not satisfy the workflow's declaration: no replay "
            "was created"), detail={"problems": wrong[:20]})
    try:
        workflow = with_confirmations(with_setup(msg.workflow))
    except ValueError as exc:
        return ErrorReply(code="invalid_workflow", message=(
            "the setup chain or a confirming pause cannot be put in this workflow"),
            detail={"problems": [str(exc)[:500]]})
    problems = rules.workflow_problems(workflow.actions)
    if problems:  # refused whole: a suffixed id must never collide with another step
        return ErrorReply(code="invalid_workflow", message=(
            "workflow step ids cannot take retry/resume suffixes"),
            detail={"problems": problems[:20]})
    tx.book.evict_finished()
    replay_id = tx.book.new_id()
    r = ReplayState(replay_id=replay_id, session_id=msg.session_id or tx.book.new_id(),
                    machine_id=msg.machine_id, workflow=workflow, mode=msg.mode,
                    operator=msg.operator, seq=tx.book.state.next_seq, created_at=tx.now,
                    updated_at=tx.now, inputs=dict(msg.inputs))
    tx.book.add(r)
    tx.book.state.next_seq += 1
    tx.touch(r)
    owner = tx.book.owner(r.session_id)
    waiting_for = owner.replay_id if owner is not None and owner is not r else None
    info = {**who(r), "workflow_id": workflow.workflow_id, "mode": msg.mode,
            "total": r.total, "operator": msg.operator, **msg.by(), "waiting_for": waiting_for,
            "setup_steps": len(workflow.actions) - len(msg.workflow.actions),
            "inputs": shown_values(workflow.inputs, msg.inputs), **about}
    tx.event(events.REPLAY_STARTED, **info)
    tx.audit("replay_started", **info)
    steps.advance(tx, r)
    return r


def status(book: ReplayBook, msg: GetReplayStatus) -> Decision:
    """One replay, or all those in memory, oldest first."""
    if msg.replay_id is None:
        items = sorted(book.replays.values(), key=lambda r: r.seq)
    elif msg.replay_id in book.replays:
        items = [book.replays[msg.replay_id]]
    else:
        return Decision(_not_found(msg.replay_id))
    return Decision(ReplayStatusReply(replays=[r.summary() for r in items]))


def resume(tx: Tx, msg: ResumeReplay) -> Decision:
    """Resume a paused replay once every required check of this pause is acknowledged."""
    r = tx.book.replays.get(msg.replay_id)
    if r is None:
        return Decision(_not_found(msg.replay_id))
    if r.status != PAUSED or r.pause is None:
        return Decision(ErrorReply(code="not_paused", message=(
            f"replay {r.replay_id} is {r.status}, not paused"), detail={"status": r.status}))
    pause = r.pause
    known = {c.id for c in pause.safety_checks}
    unknown = [i for i in msg.acknowledged_check_ids if i not in known]
    if unknown:
        return Decision(ErrorReply(code="unknown_check_ids", message=(
            "acknowledged ids that are not checks of this pause"), detail={"ids": unknown}))
    acked = set(msg.acknowledged_check_ids)
    required = [c.id for c in pause.safety_checks if c.required]
    missing = [i for i in required if i not in acked]
    if missing:
        return Decision(ErrorReply(code="required_checks_missing", message=(
            "every required check must be acknowledged"), detail={"missing": missing}))
    if required and not (msg.operator or "").strip():
        # An acknowledgement is a person's word: the trail must say whose.
        return Decision(ErrorReply(code="operator_required", message=(
            "this pause has required checks: the person acknowledging them must be "
            "named (operator)"), detail={"required": required}))
    if msg.step is not None and pause.failed_action is None:
        return Decision(ErrorReply(code="no_failed_step", message=(
            "this pause has no failed step to say done or redo"),
            detail={"reason": pause.reason}))
    ids = list(dict.fromkeys(msg.acknowledged_check_ids))
    r.checks_acknowledged = {"ids": ids, "operator": msg.operator, **msg.by(), "at": tx.now}
    resume_action_id = None
    step = msg.step or ("done" if pause.reason in rules.INPUT_REASONS else "redo")
    if pause.failed_action is not None and step == "redo":
        base = rules.base_id(pause.failed_action.action_id)
        n = r.resumes[base] = r.resumes.get(base, 0) + 1
        r.retry_budget.pop(base, None)  # a person looked: the step gets a fresh budget
        resume_action_id = rules.resume_id(base, n)
        r.inserted.insert(0, pause.failed_action.model_copy(
            update={"action_id": resume_action_id}))
        if pause.reason in (rules.ORPHAN_MAX_RESENDS, rules.DEAD_CLIENT):
            # Acked attempts are known to the agent's ledger (failed, no input): only
            # the abandoned ones may have run or be on their way.
            superseded = [aid for aid, res in r.resolved.items()
                          if res.outcome == "abandoned" and rules.base_id(aid) == base]
            if superseded:
                r.supersedes[resume_action_id] = superseded
    if pause.counts_step or (pause.failed_action is not None and step == "done"):
        r.index += 1  # the person has done this step, or found it done: it counts
        r.completed_actions += 1
    r.status, r.pause = "running", None
    r.bump("resumes")
    tx.touch(r)
    info = {**who(r), "reason": pause.reason, "acknowledged_check_ids": ids,
            "operator": msg.operator, **msg.by(), "resume_action_id": resume_action_id,
            "step": step if pause.failed_action is not None else None,
            "supersedes": r.supersedes.get(resume_action_id or "", [])}
    tx.event(events.REPLAY_RESUMED, **info)
    tx.audit("replay_resumed", **info)
    tx.effects.append(Notify(f"agent.{r.machine_id}", AgentPauseEnded(
        replay_id=r.replay_id, status="resumed")))
    remaining = r.queue_len() + (1 if r.inflight is not None else 0)
    steps.advance(tx, r)
    return tx.done(ReplayResumed(replay_id=r.replay_id, session_id=r.session_id,
                                 remaining_actions=remaining))


def cancel(tx: Tx, msg: CancelReplay) -> Decision:
    """Cancel a running or paused replay: its queue and in-flight action are purged (I4)."""
    r = tx.book.replays.get(msg.replay_id)
    if r is None:
        return Decision(_not_found(msg.replay_id))
    if not r.active:
        return Decision(ErrorReply(code="not_running", message=(
            f"replay {r.replay_id} is already {r.status}"), detail={"status": r.status}))
    outcome = end(tx, r, msg.operator, **msg.by())
    return tx.done(ReplayCancelled(replay_id=r.replay_id, session_id=r.session_id,
                                   status=outcome))


def end(tx: Tx, r: ReplayState, operator: str | None, **by: object
        ) -> Literal["cancelled", "failed"]:
    """End the active replay ``r`` (a cancel): purged, then the next of its session goes."""
    pause_reason = r.pause.reason if r.status == PAUSED and r.pause is not None else None
    # ``failed``: a person ended it at a pause a failure caused (docs/architecture.md, "The life
    # of an action"); ``cancelled``: stopped while running or at a pause nothing went wrong for.
    outcome: Literal["cancelled", "failed"] = (
        "failed" if pause_reason in rules.FAILURE_REASONS else "cancelled")
    if r.status == PAUSED:
        tx.effects.append(Notify(f"agent.{r.machine_id}", AgentPauseEnded(
            replay_id=r.replay_id, status=outcome)))
    purged = [r.inflight.action.action_id] if r.inflight is not None else []
    queued = r.queue_len()
    steps.purge(tx, r)
    r.status, r.pause = outcome, None
    tx.touch(r)
    info = {**who(r), "operator": operator, **by, "purged_inflight": purged,
            "purged_queue": queued, "outcome": outcome, "pause_reason": pause_reason}
    tx.event(events.REPLAY_CANCELLED, **info)
    tx.audit("replay_cancelled", **info)
    steps.advance_session(tx, r.session_id)
    return outcome


def pause(tx: Tx, replay_id: str, reason: str, message: str,
          safety_checks: list[SafetyCheck] | None = None,
          detail: dict[str, Any] | None = None) -> Decision:
    """Pause a running replay from outside (loop detector, operator); D8: the action in
    flight, if any, is not cancelled, its report is applied, nothing new is dispatched.
    ``detail`` (who asked, ...) goes to the pause, its event and its audit record."""
    r = tx.book.replays.get(replay_id)
    if r is None:
        return Decision(_not_found(replay_id))
    if r.status != "running":
        return Decision(ErrorReply(code="not_running", message=(
            f"replay {replay_id} is {r.status}"), detail={"status": r.status}))
    steps.pause(tx, r, rules.PauseCause(reason, message, dict(detail or {})), None,
                checks=safety_checks or [])
    inflight = r.inflight.action.action_id if r.inflight is not None else None
    return tx.done(Ack(status="paused", detail={"replay_id": replay_id,
                                                "inflight_action_id": inflight}))


def recover(tx: Tx) -> Decision:
    """After a restart from the store: resend every in-flight action with a new attempt."""
    resent: list[str] = []
    for r in tx.book.active():
        r.loop_pending.clear()  # verdicts lost with the restart are not asked again
        if r.status == PAUSED:
            # Whether its claim was granted died with us: taken back, it is sent again on
            # resume, and the agent's ledger answers it if an earlier attempt ran.
            steps.withdraw(tx, r, "dispatcher_restarted")
        if r.inflight is not None:
            resent.append(r.inflight.action.action_id)
            steps.redispatch(tx, r, "dispatcher_restarted", orphan=False)
        elif r.awaiting is not None and r.awaiting.kind != "loop":
            steps.ask(tx, r, r.awaiting.kind, r.awaiting.action)  # asked again
        else:
            # A loop verdict lost with the restart is not asked again: its report's
            # screenshot is gone; the replay goes on, as on a timeout.
            r.awaiting = None
            steps.advance(tx, r)
        if r.status == PAUSED:
            steps.notify_paused(tx, r)
    tx.audit("dispatcher_recovered", resent=resent,
             active=[r.replay_id for r in tx.book.active()])
    return tx.done(Ack(status="recovered", detail={"resent": resent}))


def _not_found(replay_id: str) -> ErrorReply:
    return ErrorReply(code="not_found", message=f"no replay {replay_id}",
                      detail={"replay_id": replay_id})

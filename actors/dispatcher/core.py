"""The dispatcher's pure core: the action state machine (docs/architecture.md).

Every public method takes one input and the current time and returns a :class:`Decision`
(reply, effects, changed replay ids). No sockets, no clock, no uuid: ``now`` is given and
ids come from ``new_id``. The shell persists the changed replays and the effects in one
transaction, then performs the effects.

Decisions (see also docs/architecture.md, "The life of an action"):

- One action in flight per session. Replays of one session run one after the other in
  start order: a later one stays ``running`` with nothing dispatched until every earlier one
  of its session has finished; a paused earlier replay keeps the session (its screen belongs
  to the person answering the pause).
- In flight is keyed by attempt_id (globally unique); action ids are unique per replay only.
- Reports: only the machine the action was sent to (transport sender *and* body) may report
  it, else ErrorReply ``wrong_machine``, recorded, no change. A report of the in-flight
  action with another attempt is ``stale``; of an accepted action ``duplicate``; of an
  abandoned one ``stale``; anything else ``unknown``.
- A report with ``success`` and a pause signal (wrong_window...) completes the step and
  pauses before the next one (resume does not redo it); a failure with a signal pauses and
  resume redoes the step as ``{base}_resume``. Resuming a pause_for_human resolves that step.
- Resends on agent hello / dispatcher restart count in ``dispatch_meta.resent_count`` but not
  in ``InFlight.resent_count``, the watchdog's give-up budget, which counts orphan resends only.
- Nothing sets ``failed`` by itself: every dead end pauses for a person, who resumes or
  cancels. Cancelled at a pause a failure caused (:data:`rules.FAILURE_REASONS`), the replay
  ends ``failed``; cancelled while running or at a pause nothing went wrong for
  (``user_request``, ``operator``), ``cancelled``.
- Resuming a step the watchdog gave up (``orphan_max_resends``, ``dead_client``): nobody
  knows whether it ran, and its abandoned copies may still reach the agent. The
  ``{base}_resume`` carries ``supersedes``, the step's abandoned ids, so that the agent's
  ledger makes one step of them all. Other pauses come from a report: the step is known not
  to have taken effect, or a person decided to redo it; nothing to supersede.
"""

from __future__ import annotations

from typing import Any, Literal

from actors.dispatcher import rules
from actors.dispatcher.consult_inputs import CLAIM_RETRY_S, VERDICT_PENDING, ConsultInputs
from actors.dispatcher.effects import Decision, Notify, RecordReport, TrackInFlight
from actors.dispatcher.engine import Tx, who
from actors.dispatcher.state import (
    PAUSED,
    InFlightEntry,
    ReplayState,
    Resolution,
)
from actors.dispatcher.watchdog_inputs import WatchdogInputs
from messages import events
from messages.control import ErrorReply
from messages.dispatch import (
    ActionProgress,
    ActionReport,
    AgentHello,
    ClaimAttempt,
    ClaimReply,
    ReportAck,
)
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
from workflow.setup_chain import with_setup


class DispatcherCore(WatchdogInputs, ConsultInputs):
    """Owns replays, queues and in-flight actions; decides, never performs."""

    # Control ------------------------------------------------------------------------------

    def start(self, msg: StartReplay, now: float) -> Decision:
        """A new replay of ``msg.workflow``; dispatches its first action if the session is free."""
        try:
            workflow = with_setup(msg.workflow)
        except ValueError as exc:
            return Decision(ErrorReply(code="invalid_workflow", message=(
                "the setup chain cannot be put in front of this workflow"),
                detail={"problems": [str(exc)[:500]]}))
        problems = rules.workflow_problems(workflow.actions)
        if problems:  # refused whole: a suffixed id must never collide with another step
            return Decision(ErrorReply(code="invalid_workflow", message=(
                "workflow step ids cannot take retry/resume suffixes"),
                detail={"problems": problems[:20]}))
        self._evict_finished()
        tx = Tx(now)
        replay_id = self._new_id()
        if replay_id in self.replays:
            raise ValueError(f"new_id returned an existing replay id {replay_id!r}")
        r = ReplayState(replay_id=replay_id, session_id=msg.session_id or self._new_id(),
                        machine_id=msg.machine_id, workflow=workflow, mode=msg.mode,
                        operator=msg.operator, seq=self.state.next_seq, created_at=now,
                        updated_at=now)
        self.state.next_seq += 1
        self._add(r)
        tx.touch(r)
        owner = self._owner(r.session_id)
        waiting_for = owner.replay_id if owner is not None and owner is not r else None
        info = {**who(r), "workflow_id": workflow.workflow_id, "mode": msg.mode,
                "total": r.total, "operator": msg.operator, **msg.by(), "waiting_for": waiting_for,
                "setup_steps": len(workflow.actions) - len(msg.workflow.actions)}
        tx.event(events.REPLAY_STARTED, **info)
        tx.audit("replay_started", **info)
        self._advance(r, tx)
        return tx.done(ReplayStarted(replay_id=replay_id, session_id=r.session_id,
                                     status=r.status))

    def status(self, msg: GetReplayStatus) -> Decision:
        """One replay, or all those in memory, oldest first."""
        if msg.replay_id is None:
            items = sorted(self.replays.values(), key=lambda r: r.seq)
        elif msg.replay_id in self.replays:
            items = [self.replays[msg.replay_id]]
        else:
            return Decision(_not_found(msg.replay_id))
        return Decision(ReplayStatusReply(replays=[r.summary() for r in items]))

    def resume(self, msg: ResumeReplay, now: float) -> Decision:
        """Resume a paused replay once every required check of this pause is acknowledged."""
        r = self.replays.get(msg.replay_id)
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
        tx = Tx(now)
        ids = list(dict.fromkeys(msg.acknowledged_check_ids))
        r.checks_acknowledged = {"ids": ids, "operator": msg.operator, **msg.by(), "at": now}
        resume_action_id = None
        if pause.failed_action is not None:
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
        if pause.counts_step:  # the person has done this step: it counts as completed
            r.index += 1
            r.completed_actions += 1
        r.status, r.pause = "running", None
        r.bump("resumes")
        tx.touch(r)
        info = {**who(r), "reason": pause.reason, "acknowledged_check_ids": ids,
                "operator": msg.operator, **msg.by(), "resume_action_id": resume_action_id,
                "supersedes": r.supersedes.get(resume_action_id or "", [])}
        tx.event(events.REPLAY_RESUMED, **info)
        tx.audit("replay_resumed", **info)
        tx.effects.append(Notify(f"agent.{r.machine_id}", AgentPauseEnded(
            replay_id=r.replay_id, status="resumed")))
        remaining = r.queue_len() + (1 if r.inflight is not None else 0)
        self._advance(r, tx)
        return tx.done(ReplayResumed(replay_id=r.replay_id, session_id=r.session_id,
                                     remaining_actions=remaining))

    def cancel(self, msg: CancelReplay, now: float) -> Decision:
        """Cancel a running or paused replay: its queue and in-flight action are purged (I4)."""
        r = self.replays.get(msg.replay_id)
        if r is None:
            return Decision(_not_found(msg.replay_id))
        if not r.active:
            return Decision(ErrorReply(code="not_running", message=(
                f"replay {r.replay_id} is already {r.status}"), detail={"status": r.status}))
        tx = Tx(now)
        pause_reason = r.pause.reason if r.status == PAUSED and r.pause is not None else None
        # ``failed``: a person ended it at a pause a failure caused (README, "An action's
        # life"); ``cancelled``: stopped while running or at a pause nothing went wrong for.
        outcome: Literal["cancelled", "failed"] = (
            "failed" if pause_reason in rules.FAILURE_REASONS else "cancelled")
        if r.status == PAUSED:
            tx.effects.append(Notify(f"agent.{r.machine_id}", AgentPauseEnded(
                replay_id=r.replay_id, status=outcome)))
        purged = [r.inflight.action.action_id] if r.inflight is not None else []
        queued = r.queue_len()
        self._purge(r, tx)
        r.status, r.pause = outcome, None
        tx.touch(r)
        info = {**who(r), "operator": msg.operator, **msg.by(), "purged_inflight": purged,
                "purged_queue": queued, "outcome": outcome, "pause_reason": pause_reason}
        tx.event(events.REPLAY_CANCELLED, **info)
        tx.audit("replay_cancelled", **info)
        self._advance_session(r.session_id, tx)
        return tx.done(ReplayCancelled(replay_id=r.replay_id, session_id=r.session_id,
                                       status=outcome))

    def pause(self, replay_id: str, reason: str, message: str, now: float,
              safety_checks: list[SafetyCheck] | None = None,
              detail: dict[str, Any] | None = None) -> Decision:
        """Pause a running replay from outside (loop detector, operator); D8: the action in
        flight, if any, is not cancelled, its report is applied, nothing new is dispatched.
        ``detail`` (who asked, ...) goes to the pause, its event and its audit record."""
        r = self.replays.get(replay_id)
        if r is None:
            return Decision(_not_found(replay_id))
        if r.status != "running":
            return Decision(ErrorReply(code="not_running", message=(
                f"replay {replay_id} is {r.status}"), detail={"status": r.status}))
        tx = Tx(now)
        self._pause(r, tx, rules.PauseCause(reason, message, dict(detail or {})), None,
                    checks=safety_checks or [])
        inflight = r.inflight.action.action_id if r.inflight is not None else None
        return tx.done(Ack(status="paused", detail={"replay_id": replay_id,
                                                    "inflight_action_id": inflight}))

    # Agent --------------------------------------------------------------------------------

    def report(self, msg: ActionReport, sender_machine: str, now: float) -> Decision:
        """Apply the first current report of an action (I3); record every other one."""
        tx = Tx(now)
        r = self.replays.get(msg.replay_id)
        entry = r.inflight if r is not None else None
        if entry is not None and entry.action.action_id != msg.action_id:
            entry = None
        done = r.resolved.get(msg.action_id) if r is not None else None
        expected = entry.machine_id if entry is not None else (
            r.machine_id if r is not None and done is not None else None)
        if sender_machine != msg.machine_id or (expected is not None and (
                sender_machine != expected or msg.machine_id != expected)):
            # Only the worker the action was sent to may report it, and no agent for another
            # (an authenticated sender is not the body's machine_id; docs/protocol.md).
            tx.effects.append(RecordReport(msg, "refused", sender_machine, now))
            tx.audit("report_refused", replay_id=msg.replay_id, action_id=msg.action_id,
                     attempt_id=msg.attempt_id, sender_machine=sender_machine,
                     claimed_machine=msg.machine_id, expected_machine=expected)
            return tx.done(ErrorReply(code="wrong_machine", message=(
                f"action {msg.action_id} was not dispatched to {sender_machine}"),
                detail={"action_id": msg.action_id, "attempt_id": msg.attempt_id}))
        if r is not None and entry is not None:
            status = "accepted" if entry.attempt_id == msg.attempt_id else "stale"
        elif done is not None:
            status = "duplicate" if done.outcome == "acked" else "stale"
        else:
            status = "unknown"  # cancelled replay's action (case m), precheck ids (case q)
        tx.effects.append(RecordReport(msg, status, sender_machine, now))
        tx.audit("report_received", status=status, sender_machine=sender_machine,
                 report=msg.model_dump(mode="python"))
        if r is not None and entry is not None and status == "accepted":
            self._apply_report(r, entry, msg, tx)
        return tx.done(ReportAck(action_id=msg.action_id, attempt_id=msg.attempt_id,
                                 status=status))

    def agent_hello(self, msg: AgentHello, now: float,
                    underway: frozenset[str] = frozenset()) -> Decision:
        """An agent (re)connected: resend what it should be doing, show pauses again.

        Not resent: the attempts the hello says the agent holds, and ``underway``, those the
        shell knows to be in this agent process's hands or still on their way to it (a
        dispatch the broker queued before the agent was there: process.py).
        """
        tx = Tx(now)
        resent: list[str] = []
        held = set(msg.holding) | underway
        kept: list[str] = []
        for r in self._active():
            if r.inflight is not None and r.inflight.machine_id == msg.machine_id:
                if r.inflight.attempt_id in held:  # it has it: its report will come
                    kept.append(r.inflight.action.action_id)
                    continue
                resent.append(r.inflight.action.action_id)
                self._redispatch(r, "agent_reconnected", tx, orphan=False)
            elif r.machine_id == msg.machine_id and r.status == "running":
                self._advance(r, tx)
            if r.machine_id == msg.machine_id and r.status == PAUSED:
                self._notify_paused(r, tx)
        tx.audit("agent_hello", machine_id=msg.machine_id, instance_id=msg.instance_id,
                 pid=msg.pid, resent=resent, kept=kept)
        return tx.done(Ack(detail={"resent": resent, "kept": kept}))

    def claim(self, msg: ClaimAttempt, sender_machine: str, now: float) -> Decision:
        """May the agent perform this attempt now? Only if it is the one in flight.

        Asked by the agent before any input (agent/serve.py): a copy that stayed in a frozen
        agent's socket while the watchdog resent or gave up, or the replay was cancelled, is
        no longer current and never runs. Not stored: after a restart of ours every action
        in flight is re-sent under a new attempt, and the old one is refused.
        """
        r = self._current(msg.action_id, msg.attempt_id)
        if r is None or r.inflight is None or r.replay_id != msg.replay_id:
            return Decision(ClaimReply(granted=False, reason="not_current"))
        if sender_machine != r.inflight.machine_id or msg.machine_id != r.inflight.machine_id:
            return Decision(ClaimReply(granted=False, reason="wrong_machine"))
        if self.claim_waits(r):
            return Decision(ClaimReply(granted=False, reason=VERDICT_PENDING,
                                       retry_in_s=CLAIM_RETRY_S))
        r.inflight.claimed = True
        return Decision(ClaimReply(granted=True))

    def progress(self, msg: ActionProgress, sender_machine: str, now: float) -> Decision:
        """The agent says the attempt in flight is still under way, and for how long."""
        r = self._current(msg.action_id, msg.attempt_id)
        e = r.inflight if r is not None else None
        if r is None or e is None or r.replay_id != msg.replay_id:
            return Decision(Ack(status="stale"))
        if sender_machine != e.machine_id or msg.machine_id != e.machine_id:
            return Decision(ErrorReply(code="wrong_machine", message=(
                f"action {msg.action_id} was not dispatched to {sender_machine}")))
        tx = Tx(now)
        e.progress, e.patience_s = msg.state, msg.hold_s
        tx.effects.append(TrackInFlight(r.tracked()))  # the watchdog's clock starts again
        info = {**who(r, msg.action_id), "attempt_id": msg.attempt_id, "state": msg.state,
                "hold_s": msg.hold_s, "detail": msg.detail}
        tx.event(events.ACTION_PROGRESS, **info)
        tx.audit("action_progress", **info)
        return tx.done(Ack(status="noted"))

    def recover(self, now: float) -> Decision:
        """After a restart from the store: resend every in-flight action with a new attempt."""
        tx = Tx(now)
        resent: list[str] = []
        for r in self._active():
            r.loop_pending.clear()  # verdicts lost with the restart are not asked again
            if r.inflight is not None:
                resent.append(r.inflight.action.action_id)
                self._redispatch(r, "dispatcher_restarted", tx, orphan=False)
            elif r.awaiting is not None and r.awaiting.kind != "loop":
                self._consult(r, r.awaiting.kind, r.awaiting.action, tx)  # asked again
            else:
                # A loop verdict lost with the restart is not asked again: its report's
                # screenshot is gone; the replay goes on, as on a timeout.
                r.awaiting = None
                self._advance(r, tx)
            if r.status == PAUSED:
                self._notify_paused(r, tx)
        tx.audit("dispatcher_recovered", resent=resent,
                 active=[r.replay_id for r in self._active()])
        return tx.done(Ack(status="recovered", detail={"resent": resent}))

    # Transitions --------------------------------------------------------------------------

    def _apply_report(self, r: ReplayState, entry: InFlightEntry, msg: ActionReport,
                      tx: Tx) -> None:
        action = entry.action
        self._untrack(r, tx)
        r.resolved[action.action_id] = Resolution("acked", entry.attempt_id)
        r.supersedes.pop(action.action_id, None)
        r.bump("reports")
        if msg.warning == "already_executed":
            r.bump("already_executed")
        tx.touch(r)
        tx.event(events.ACTION_ACKED, **who(r, action.action_id), attempt_id=entry.attempt_id,
                 success=msg.success, error=msg.error, warning=msg.warning)
        cause = rules.report_pause(msg, action)
        if msg.success:
            # The step is done even if the report asks for a person: pause before the next
            # step, and do not re-execute this one on resume (no double click).
            r.completed_actions += 1
            r.index += 1
            if cause is not None:
                self._pause(r, tx, cause, action)
        elif cause is not None:
            self._pause(r, tx, cause, action, failed=action)
        else:
            base = rules.base_id(action.action_id)
            used = r.retry_budget.get(base, 0)
            if used < self.config.max_retries_per_action:
                n = r.retries[base] = r.retries.get(base, 0) + 1
                r.retry_budget[base] = used + 1
                retry = action.model_copy(update={"action_id": rules.retry_id(base, n)})
                r.inserted.insert(0, retry)
                r.bump("retries")
                tx.audit("retry_scheduled", **who(r, action.action_id),
                         retry_action_id=retry.action_id, error=msg.error, budget_used=used + 1)
            else:
                self._pause(r, tx, rules.retries_exhausted(msg, action, used), action,
                            failed=action)
        r.last_screenshot = msg.screenshot_after or msg.screenshot_before or r.last_screenshot
        if self.config.loop_detector and r.status == "running" and r.queue_len():
            self._observe(r, entry, msg, tx)  # the verdict is pipelined (consult_inputs.py)
        self._advance(r, tx)

def _not_found(replay_id: str) -> ErrorReply:
    return ErrorReply(code="not_found", message=f"no replay {replay_id}",
                      detail={"replay_id": replay_id})

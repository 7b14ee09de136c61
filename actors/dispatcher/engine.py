"""The dispatcher core's transition machinery: dispatch, resend, pause, complete, lookups.

:class:`Engine` holds the state and the small steps every public input is made of;
:class:`~actors.dispatcher.core.DispatcherCore` strings them together per input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from actors.dispatcher import consult, rules
from actors.dispatcher.consult import consult_request
from actors.dispatcher.effects import (
    AuditRecord,
    Consult,
    Decision,
    Effect,
    Notify,
    PublishEvent,
    SendToAgent,
    TrackInFlight,
    UntrackInFlight,
)
from actors.dispatcher.invariants import check_invariants
from actors.dispatcher.state import (
    PAUSED,
    Awaiting,
    DispatcherConfig,
    DispatcherState,
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
from messages.workflow import SCREEN_TYPES, Action
from workflow.safety import pause_checks


class Tx:
    """Collects the effects and changed replays of one decision."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.effects: list[Effect] = []
        self.changed: set[str] = set()

    def touch(self, r: ReplayState) -> None:
        r.updated_at = self.now
        self.changed.add(r.replay_id)

    def event(self, topic: str, **data: object) -> None:
        self.effects.append(PublishEvent(topic, {**data, "at": self.now}))

    def audit(self, kind: str, **data: object) -> None:
        self.effects.append(AuditRecord(kind, {**data, "at": self.now}))

    def done(self, reply: Message) -> Decision:
        return Decision(reply, self.effects, self.changed)


def who(r: ReplayState, action_id: str | None = None) -> dict[str, object]:
    """The ids every event and audit record of a replay carries."""
    ids: dict[str, object] = {"replay_id": r.replay_id, "session_id": r.session_id,
                              "machine_id": r.machine_id}
    if action_id is not None:
        ids["action_id"] = action_id
    return ids


class Engine:
    """The state and the transitions shared by every input."""

    def __init__(self, config: DispatcherConfig, new_id: Callable[[], str],
                 state: DispatcherState | None = None) -> None:
        self.config = config
        self._new_id = new_id
        self.state = state if state is not None else DispatcherState()
        # attempt_id -> replay_id of every action in flight: attempt ids are globally unique,
        # action ids only within a replay (one workflow may run on two machines at once).
        self._by_attempt: dict[str, str] = {
            r.inflight.attempt_id: r.replay_id
            for r in self.state.replays.values() if r.inflight is not None}
        # session_id -> its replays in memory, oldest first: the session's owner is looked up
        # at every step, and a scan of every replay (1,000 finished ones kept) cost more.
        self._sessions: dict[str, list[ReplayState]] = {}
        for r in sorted(self.state.replays.values(), key=lambda r: r.seq):
            self._sessions.setdefault(r.session_id, []).append(r)

    @property
    def replays(self) -> dict[str, ReplayState]:
        return self.state.replays

    def check_invariants(self, decision: Decision | None = None) -> None:
        """Raise AssertionError naming the first broken invariant (I1-I6 and ours)."""
        check_invariants(self.state.replays, self._by_attempt, decision)

    def _advance(self, r: ReplayState, tx: Tx) -> None:
        """Dispatch the next action if the replay runs, owns its session and has none in flight
        (nor waits for another actor's answer)."""
        while (r.status == "running" and r.inflight is None and r.awaiting is None
               and self._owner(r.session_id) is r):
            head = r.pop_head()
            tx.touch(r)
            if head is None:
                self._complete(r, tx)
                return
            if head.type != "pause_for_human":
                self._dispatch(r, head, tx)
                return
            checks = pause_checks(head)
            if r.mode == "supervised" or checks:
                self._pause_for_human(r, head, checks, tx)
                return
            # Autonomous mode: a pause_for_human without checks is skipped (a medical_critical
            # one always has a required check: messages.safety.pause_checks).
            r.index += 1
            r.completed_actions += 1  # resolved: progress reaches total on completion
            r.bump("skipped")
            info = {**who(r, head.action_id), "reason": "autonomous_mode"}
            tx.event(events.ACTION_ACKED, **info, outcome="skipped")
            tx.audit("action_skipped", **info)

    def _pause_for_human(self, r: ReplayState, action: Action, checks: list[SafetyCheck],
                         tx: Tx) -> None:
        """Pause at a pause_for_human, with the checklist the safety_checks actor builds;
        first a fresh capture from the agent if the model will want a screen and no step
        left one (consult.wants_capture)."""
        if self.config.safety_checks and consult.wants_capture(r, action, self.config):
            self._consult(r, "capture", action, tx)
        elif self.config.safety_checks:
            self._consult(r, "payload", action, tx)
        else:
            self._pause(r, tx, rules.human_pause(action, checks), action, checks=checks,
                        counts_step=True)

    def _consult(self, r: ReplayState, kind: Literal["loop", "route", "capture", "payload"],
                 action: Action | None, tx: Tx, message: Message | None = None) -> None:
        """Wait for another actor's answer before the replay's next step (consult.py)."""
        r.awaiting = Awaiting(kind, self._new_id(), tx.now, action)
        tx.touch(r)
        request = message if message is not None else consult_request(r)
        service, timeout = {
            "loop": ("loop_detector", self.config.loop_timeout_s),
            "route": ("monitor_router", self.config.route_timeout_s),
            "capture": (f"agent.{r.machine_id}", self.config.llm_timeout_s),
            "payload": ("safety_checks", self.config.payload_timeout_s)}[kind]
        tx.effects.append(Consult(service, r.replay_id, r.awaiting.token, request, timeout))

    def _drop_awaiting(self, r: ReplayState) -> None:
        """Stop waiting (a pause or the end came first); an action taken off the queue for
        it goes back to the head, and its answer, when it comes, is stale; so are the loop
        verdicts still pending."""
        a, r.awaiting = r.awaiting, None
        r.loop_pending.clear()
        if a is not None and a.action is not None and r.active:
            r.inserted.insert(0, a.action)

    def _advance_session(self, session_id: str, tx: Tx) -> None:
        owner = self._owner(session_id)
        if owner is not None:
            self._advance(owner, tx)

    def _dispatch(self, r: ReplayState, action: Action, tx: Tx) -> None:
        """Dispatch ``action``, once the monitor router has said on which monitor."""
        if self.config.monitor_router and action.type in SCREEN_TYPES:
            self._consult(r, "route", action, tx)
        else:
            self._dispatch_now(r, action, None, tx)

    def _dispatch_now(self, r: ReplayState, action: Action,
                      resolution: dict[str, Any] | None, tx: Tx) -> None:
        now = tx.now
        r.inflight = InFlightEntry(action=action, attempt_id=self._new_id(),
                                   machine_id=r.machine_id, first_dispatched_at=now,
                                   dispatched_at=now, monitor_resolution=resolution)
        r.bump("dispatched")
        self._send(r, tx)

    def _redispatch(self, r: ReplayState, reason: str, tx: Tx, *, orphan: bool) -> None:
        """Same action_id, new attempt_id; only watchdog resends use the watchdog's budget."""
        old = r.inflight
        if old is None:
            raise ValueError(f"replay {r.replay_id} has nothing in flight")
        self._untrack(r, tx)
        r.inflight = replace(old, attempt_id=self._new_id(), dispatched_at=tx.now,
                             resent_count=old.resent_count + 1, last_resent_at=tx.now,
                             resend_reason=reason,
                             orphan_resends=old.orphan_resends + (1 if orphan else 0))
        r.bump("resent")
        self._send(r, tx)

    def _send(self, r: ReplayState, tx: Tx) -> None:
        e = r.inflight
        if e is None:
            raise ValueError(f"replay {r.replay_id} has nothing in flight")
        if e.attempt_id in self._by_attempt:
            raise ValueError(f"new_id returned an attempt id in use {e.attempt_id!r}")
        self._by_attempt[e.attempt_id] = r.replay_id
        tx.touch(r)
        # Track before sending: a report can then never beat the watchdog's entry.
        tx.effects.append(TrackInFlight(r.tracked()))
        # Every copy carries the ids it redoes: any of them may be the one the agent gets.
        supersedes = r.supersedes.get(e.action.action_id, [])
        resolution = (None if e.monitor_resolution is None
                      else MonitorResolution.model_validate(e.monitor_resolution))
        tx.effects.append(SendToAgent(e.machine_id, DispatchAction(
            replay_id=r.replay_id, session_id=r.session_id, machine_id=e.machine_id,
            action=e.action, attempt_id=e.attempt_id, dispatch_meta=e.meta(),
            monitor_resolution=resolution, supersedes=list(supersedes))))
        info = {**who(r, e.action.action_id), "attempt_id": e.attempt_id,
                "action_type": e.action.type, "resent_count": e.resent_count,
                "resend_reason": e.resend_reason, "monitor_resolution": e.monitor_resolution}
        if supersedes:
            info["supersedes"] = list(supersedes)
        tx.event(events.ACTION_DISPATCHED, **info)
        tx.audit("action_resent" if e.resent_count else "action_dispatched", **info)

    def _untrack(self, r: ReplayState, tx: Tx) -> None:
        e = r.inflight
        if e is None:
            return
        r.inflight = None
        self._by_attempt.pop(e.attempt_id, None)
        tx.touch(r)
        tx.effects.append(UntrackInFlight(e.action.action_id, e.attempt_id))

    def _purge(self, r: ReplayState, tx: Tx) -> None:
        """D4 / I4: no queue and nothing in flight once a replay is finished."""
        self._untrack(r, tx)
        r.awaiting = None
        r.loop_pending.clear()
        r.clear_queue()
        r.last_screenshot = None
        tx.touch(r)
        if self.config.loop_detector:
            tx.effects.append(Notify("loop_detector", ForgetReplay(replay_id=r.replay_id)))

    def _complete(self, r: ReplayState, tx: Tx) -> None:
        self._purge(r, tx)
        r.status = "completed"
        info = {**who(r), "completed_actions": r.completed_actions, "total": r.total,
                "counters": dict(r.counters)}
        tx.event(events.REPLAY_COMPLETED, **info)
        tx.audit("replay_completed", **info)
        self._advance_session(r.session_id, tx)

    def _pause(self, r: ReplayState, tx: Tx, cause: rules.PauseCause, action: Action | None,
               *, failed: Action | None = None, checks: list[SafetyCheck] | None = None,
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
        self._drop_awaiting(r)
        r.status = PAUSED
        r.bump("pauses")
        tx.touch(r)
        info = {**who(r, r.pause.action_id), "reason": cause.reason, "message": cause.message,
                "detail": cause.detail, "resume_action": failed.action_id if failed else None,
                "safety_checks": [c.model_dump(mode="json") for c in all_checks]}
        tx.event(events.REPLAY_PAUSED, **info)
        tx.audit("replay_paused", **info)
        self._notify_paused(r, tx)

    def _notify_paused(self, r: ReplayState, tx: Tx) -> None:
        """Show the pause to the person at the workstation (messages/pause.py)."""
        p = r.pause
        if p is not None:
            tx.effects.append(Notify(f"agent.{r.machine_id}", AgentPaused(
                replay_id=r.replay_id, reason=p.reason, message=p.message,
                action_id=p.action_id, safety_checks=list(p.safety_checks), paused_at=p.at)))

    # Lookups ------------------------------------------------------------------------------

    def _active(self) -> list[ReplayState]:
        return sorted((r for r in self.replays.values() if r.active), key=lambda r: r.seq)

    def _add(self, r: ReplayState) -> None:
        """A new replay, the newest of its session."""
        self.replays[r.replay_id] = r
        self._sessions.setdefault(r.session_id, []).append(r)

    def _owner(self, session_id: str) -> ReplayState | None:
        """The replay whose turn it is on a session: the oldest one not finished."""
        return next((r for r in self._sessions.get(session_id, ()) if r.active), None)

    def _current(self, action_id: str, attempt_id: str) -> ReplayState | None:
        """The replay whose in-flight action is exactly this attempt (I5), or None."""
        rid = self._by_attempt.get(attempt_id)
        r = self.replays.get(rid) if rid is not None else None
        if r is None or r.inflight is None or r.inflight.action.action_id != action_id:
            return None
        return r

    def _evict_finished(self) -> None:
        """Forget the oldest finished replays past the limit (they stay in the store)."""
        done = sorted((r for r in self.replays.values() if not r.active), key=lambda r: r.seq)
        for r in done[:max(0, len(done) - self.config.max_finished_replays)]:
            del self.replays[r.replay_id]
            session = self._sessions[r.session_id]
            session.remove(r)
            if not session:
                del self._sessions[r.session_id]

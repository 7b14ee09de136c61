"""The dispatcher actor process: the thin shell around :class:`DispatcherCore`.

For every request: decode, call the core, and if the core decided it durable
(``Decision.durable``), stage the replays it writes and the effects that nothing else would
bring back (the outbox, store.OUTBOX_EFFECTS) in the turn's SQLite transaction. At the end
of the loop's turn the transaction is committed with one fsync for all its decisions (a
group commit), and only then are the turn's replies sent and its effects performed
(docs/durability.md): nothing leaves before the state that explains it is on disk. A crash
between commit and perform re-performs the pending outbox at start (receivers dedupe), and
re-sends the in-flight actions with new attempt ids.

Who sent a request (docs/protocol.md, "CURVE and identity"): an agent that came in with CURVE is
known by the identity the broker authenticated (``Incoming.identity``); it may only report, claim,
tell progress and say hello, each for its own machine, and anything else it asks (a replay control
command) is refused ``forbidden`` (agents report; people control). Every refusal is an audit record.
Without CURVE (loopback, SSH tunnel) nothing tells agents apart: the body's ``machine_id``
stands for the sender. People's commands are taken from the tree (the console) and from the
people's door only (actors/base.py, actors/callers.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from loguru import logger

from actors.base import Actor, Deferred, Incoming, MachineOf, caller_of
from actors.dispatcher.audit_records import outbox_records
from actors.dispatcher.core import DispatcherCore
from actors.dispatcher.held_claims import HeldClaims
from actors.dispatcher.leader.election import STEPPED_DOWN_EXIT, Leadership, wait_to_lead
from actors.dispatcher.loop_batch import LoopBatcher
from actors.dispatcher.machine.decision import (
    AuditRecord,
    Consult,
    Decision,
    Effect,
    Notify,
    PublishEvent,
    RecordReport,
    SendToAgent,
    TrackInFlight,
    UntrackInFlight,
)
from actors.dispatcher.machine.state import DispatcherConfig
from actors.dispatcher.routes import ROUTES, Applies, Route
from actors.dispatcher.settings import config_from_env
from actors.dispatcher.store.db import StoreUnavailable
from actors.dispatcher.store.dispatcher_store import DispatcherStore
from actors.dispatcher.store.open import open_store
from actors.store_exits import LOST_EXIT, exit_on_loss, open_or_exit
from audit_outbox.sender import BACKLOG_EVERY_S, AuditSender
from messages import events
from messages.base import Message
from messages.codec import Envelope, decode, encode, new_id
from messages.control import ErrorReply, Ping
from messages.dispatch import (
    ActionProgress,
    ActionReceived,
    ActionReport,
    AgentHello,
    ClaimAttempt,
    OrphanGiveUp,
    OrphanResend,
    Track,
    TrackBatch,
    Untrack,
)
from messages.queue import (
    AddItems,
    AgentAvailable,
    CreateQueue,
    ItemCommand,
)
from messages.replay import (
    CancelReplay,
    PauseReplay,
    ResumeReplay,
    StartReplay,
)
from runtime.settings import Settings
from transport.client import CallFailed

if TYPE_CHECKING:
    from actors.dispatcher.store.lease import LeaseDb

# Acknowledged outbox rows are deleted in batches, in the next transaction or on a timer: a
# crash before that only sends their records again, which audit_log stores once.
_FLUSH_SENT_S = 0.2
# Track / Untrack go to the watchdog together in one TrackBatch this often, not as two round
# trips per step (a large share of the tree's work per step: bench/turnaround.py measures
# it): its timers run for tens of seconds.
_WATCHDOG_BATCH_S = 0.1
_DEADLINES_S = 5.0
"""How often work items waiting are checked against their deadlines
(actors/dispatcher/machine/queue_deadlines.py)."""
_AUDIT_S = 0.05
"""How often audit records committed since are sent (a batch at a time; an ack sends the next
batch at once only when the last one was full)."""


def _machine(msg: Any) -> str:
    return str(msg.machine_id)


# Named in an audit record of a refused request, when the request has them.
_REFUSAL_FIELDS = ("replay_id", "machine_id", "action_id", "attempt_id", "operator")


class DispatcherActor(Actor):
    """Owns replays, their queues and in-flight actions, and the state machine of
    docs/architecture.md."""

    service = "dispatcher"
    # Requests answered in one turn share one fsync; the broker gives a connection its next
    # request only once the last is answered, so a turn holds at most this many requests.
    worker_connections: ClassVar[int] = 8
    # A report is let through whatever machine it names: the core refuses it and keeps it in
    # the reports log (core.report). Control commands are not here: people control.
    agent_requests: ClassVar[Mapping[type[Message], MachineOf | None]] = {
        Ping: None, ActionReport: None, ClaimAttempt: _machine,
        ActionProgress: _machine, AgentHello: _machine, AgentAvailable: _machine}
    # People's commands (actors/callers.py), and the watchdog's, which fail or re-send steps.
    control_requests: ClassVar[frozenset[type[Message]]] = frozenset({
        StartReplay, ResumeReplay, PauseReplay, CancelReplay, CreateQueue, AddItems,
        ItemCommand})
    tree_requests: ClassVar[frozenset[type[Message]]] = frozenset(
        (OrphanResend, OrphanGiveUp))

    def __init__(self, settings: Settings, config: DispatcherConfig | None = None) -> None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        # Before the sockets: a database out of reach ends the process here; on PostgreSQL
        # a standby waits here, no worker registered, until it leads
        # (actors/dispatcher/leader/election.py).
        self.store = _open_store(settings)
        super().__init__(settings)
        # Half the connections at most: the others stay for reports and people.
        self._held_claims: HeldClaims[Incoming] = HeldClaims(self.worker_connections // 2)
        # On PostgreSQL the store's session is a lease.LeaseDb (pg_store.PgDb).
        self.leadership = (Leadership(settings, self, cast("LeaseDb", self.store.db))
                           if settings.database_url else None)
        self.core = DispatcherCore(config or config_from_env(), new_id, self.store.load())
        self.core.book.queues.load(*self.store.load_queues())
        self._sent: list[int] = []
        self._watchdog: list[Track | Untrack] = []
        self._grouped = False  # run(): decisions wait for the end of the turn (end_turn)
        self._turn: list[Effect] = []  # effects of the turn's staged decisions
        # Dispatches sent and still in flight: attempt id -> the agent process that
        # received it (its instance_id), or None while on its way (on_hello).
        self._underway: dict[str, str | None] = {}
        self._dispatch_timeout_s = settings.request_expiry_s + settings.heartbeat_expiry_s + 1
        for kind, route in ROUTES.items():
            self.handle(kind, self._serve(route))
        # The agents' requests: their sender is the authenticated agent (CURVE), else the
        # body's machine_id.
        self.handle(ActionReport, self.on_report)
        self.handle(ClaimAttempt, self.on_claim)
        self.handle(ActionProgress, self.on_progress)
        self.handle(AgentHello, self.on_hello)
        self.handle(AgentAvailable, self.on_available)
        # A lambda: self._sent is a new list after each commit.
        self.loop = LoopBatcher(
            lambda service, message, callback, timeout_s: self.call(
                service, message, callback, timeout_s=timeout_s, retries=0),
            self._consulted)
        self.audit = AuditSender(outbox_records(self.store), self.call,
                                 lambda ids: self._sent.extend(ids), label=self.service)
        self.every(_FLUSH_SENT_S, lambda _now: self._flush_sent())
        self.every(_AUDIT_S, self.audit.tick)
        self.every(BACKLOG_EVERY_S, lambda _now: self._report_backlog())
        self.every(_WATCHDOG_BATCH_S, lambda _now: self._flush_watchdog())
        self.every(_DEADLINES_S, self._check_deadlines)

    def _check_deadlines(self, _now: float) -> None:
        self._apply(self.core.check_deadlines(time.time()))

    def _report_backlog(self) -> None:
        """``lea:audit_backlog``: the audit records the outbox still holds."""
        try:
            pending = self.store.outbox_count()
        except Exception as exc:  # whichever database: a count for watchers stops nothing
            logger.warning("dispatcher: cannot count the audit outbox: {}", exc)
            return
        self.publish(events.AUDIT_BACKLOG, sender=self.service, pending=pending)

    def run(self) -> int:
        self._grouped = True
        code = super().run()
        return STEPPED_DOWN_EXIT if self.leadership and self.leadership.stepped_down else code

    def on_hello(self, msg: AgentHello, _req: Incoming) -> Message:
        """An agent (re)connected. What this same process received, and what is still on its
        way to the agent (the broker keeps a dispatch for a service with no worker and hands
        it to the agent when it comes), is in its hands or will be: not sent again. (Its
        hello may be sent before that dispatch arrives, or answered after its receipt.)"""
        underway = frozenset(a for a, who in self._underway.items()
                             if who is None or who == msg.instance_id)
        return self._apply(self.core.agent_hello(msg, time.time(), underway))

    def on_start(self) -> None:
        if self.leadership is not None:
            self.leadership.tell()
        decision = self.core.recover(time.time())
        if decision.effects:
            logger.info("dispatcher: recovered, re-sending {} in-flight action(s)",
                        sum(isinstance(e, SendToAgent) for e in decision.effects))
        self._apply(decision)

    def on_stop(self) -> None:
        # A watchdog batch not sent yet is not lost: at the start every in-flight action is
        # re-sent, tracked again under its new attempt id.
        self._flush_sent()
        self.end_turn()
        self.store.close()  # on PostgreSQL, releases the leader's lock
        if self.leadership is not None:
            self.leadership.close()

    def end_turn(self) -> None:
        """The group commit: one fsync for the turn's decisions, then their effects (the
        base sends the turn's replies after this). A failed commit stops the process: the
        core's memory is ahead of the disk, and nothing of the turn may go out; the
        supervisor restarts us from what is on disk (docs/durability.md)."""
        # Held claims whose verdict came (or whose replay paused) this turn: their replies
        # go with the turn's, after its commit.
        self._held_claims.answer(self._claim_now, self.answer_held)
        if not self.store.staged:
            return
        try:
            self.store.harden()
        except Exception:
            self._stop_on_disk_failure()
        held, self._turn = self._turn, []
        # Dispatches first (a stable sort): an agent is waiting for them, the bus and the
        # bookkeeping are not. The store wrote the reports log; audit records wait in the
        # outbox for the AuditSender.
        for effect in sorted(held, key=lambda e: not isinstance(e, SendToAgent)):
            self._perform(effect)
        self.audit.notify()

    def _stop_on_disk_failure(self) -> None:
        """Exit now, sending nothing more: the turn's decisions are not on disk (they are
        rolled back) but in memory and in the replies the loop holds."""
        logger.exception("dispatcher: cannot commit the turn's decisions; stopping")
        os._exit(LOST_EXIT)  # a commit failed: restarted from what is on disk

    def on_progress(self, msg: ActionProgress, req: Incoming) -> Message:
        return self._apply(self.core.progress(msg, req.agent or msg.machine_id, time.time()))

    def on_available(self, msg: AgentAvailable, req: Incoming) -> Message:
        sender = msg.model_copy(update={"machine_id": req.identity or msg.machine_id})
        return self._apply(self.core.agent_available(sender, time.time()))

    def on_report(self, msg: ActionReport, req: Incoming) -> Message:
        # The authenticated sender if there is one (CURVE), else the body's machine_id.
        sender = req.agent or msg.machine_id
        decision = self.core.report(msg, sender, time.time())
        if isinstance(decision.reply, ErrorReply):  # refused: recorded by the core
            self.publish(events.SENDER_REFUSED, service=self.service, type=msg.type_name,
                         identity=req.identity, sender_machine=sender, code=decision.reply.code,
                         message=decision.reply.message)
        return self._apply(decision)

    def refuse_sender(self, msg: Message, req: Incoming, code: str, text: str) -> Message:
        """As every actor does (log, ``lea:sender_refused``), and an audit record."""
        reply = super().refuse_sender(msg, req, code, text)
        return self._apply(self.core.refused(
            reply, time.time(), type=msg.type_name, code=code, identity=req.identity,
            message=text, **caller_of(req), **{k: getattr(msg, k) for k in _REFUSAL_FIELDS
                             if isinstance(getattr(msg, k, None), str)}))

    # The shell ------------------------------------------------------------------------------

    def _serve(self, route: Route) -> Callable[[Message, Incoming], Message]:
        """The handler of a row of :data:`~actors.dispatcher.routes.ROUTES`.

        A control request (``Applies.ONCE``) is applied at most once per envelope id: a
        client retries with the same envelope id (Lazy Pirate), and the broker keeps a
        request queued while we are down: both copies may reach us, and a second StartReplay
        would run the workflow twice (a second ResumeReplay could answer a newer pause
        nobody has seen). The reply is committed with the decision; a copy gets it again.
        """
        def handler(msg: Message, req: Incoming) -> Message:
            if route.applies is Applies.READ:
                return route.decide(self.core, msg, time.time()).reply
            if route.applies is Applies.STATE:
                return self._apply(route.decide(self.core, msg, time.time()))
            kind = type(msg).__name__
            done = self.store.reply_for(req.id, kind)
            if done is not None:
                logger.warning("dispatcher: {} {} already applied: answering it again", kind,
                               req.id)
                return decode(done).body
            return self._apply(route.decide(self.core, msg, time.time()), (req.id, kind))

        return handler

    def _apply(self, decision: Decision, request: tuple[str, str] | None = None) -> Message:
        """Stage the decision; returns the reply. Nothing is sent before the commit.

        Under :meth:`run`, the reply and the effects wait for the end of the turn (the group
        commit, :meth:`end_turn`); called in-process (tests), it commits and performs at once.
        ``request`` ``(envelope id, kind)``: a control request, recorded with its reply.
        """
        if not decision.durable:  # the core's word: nothing to keep
            return decision.reply
        record = None if request is None else (*request, encode(decision.reply, request[0]))
        # The rows performed since the last commit are deleted in this one: no transaction
        # of their own while busy (the timer flushes them when idle).
        try:
            self.store.stage(decision.writes, decision.effects, record, sent=self._sent,
                             queues=decision.new_queues, new_items=decision.new_items,
                             items=decision.items)
        except Exception:
            if self._grouped:  # the turn is rolled back: its replies must not go out
                self._stop_on_disk_failure()
            raise
        self._sent = []
        self._turn.extend(e for e in decision.effects
                          if not isinstance(e, RecordReport | AuditRecord))
        if not self._grouped:
            self.end_turn()
        return decision.reply

    def _flush_sent(self) -> None:
        if self._sent:
            sent, self._sent = self._sent, []
            self.store.mark_sent(sent)
            if not self._grouped:
                self.end_turn()

    def _flush_watchdog(self) -> None:
        if self._watchdog:
            batch, self._watchdog = self._watchdog, []
            self.call("watchdog", TrackBatch(updates=batch), _ignore, timeout_s=2.0,
                      retries=2)

    def _perform(self, effect: Effect) -> None:
        """Perform one committed effect."""
        if isinstance(effect, TrackInFlight | UntrackInFlight):
            self._watchdog.append(
                Track(entry=effect.entry) if isinstance(effect, TrackInFlight)
                else Untrack(action_id=effect.action_id, attempt_id=effect.attempt_id))
            if isinstance(effect, UntrackInFlight):
                self._underway.pop(effect.attempt_id, None)
        elif isinstance(effect, SendToAgent):
            # No transport retry: a lost dispatch is the watchdog's and the hello's business,
            # and each resend must carry a new attempt_id (docs/architecture.md). Waited for as long
            # as the broker may still deliver it (it keeps a request request_expiry_s).
            attempt = effect.message.attempt_id
            self._underway[attempt] = None
            self.call(f"agent.{effect.machine_id}", effect.message,
                      self._receipt(effect.message.action.action_id, attempt),
                      timeout_s=self._dispatch_timeout_s, retries=0)
        elif isinstance(effect, Consult) and effect.service == self.loop.service:
            self.loop.add(effect)
        elif isinstance(effect, Consult):
            self.call(effect.service, effect.message, self._answered(effect),
                      timeout_s=effect.timeout_s, retries=0)
        elif isinstance(effect, Notify):
            self.call(effect.service, effect.message, _ignore, timeout_s=5.0, retries=1)
        elif isinstance(effect, PublishEvent):
            self.publish(effect.topic, **effect.data)

    def _answered(self, consult: Consult) -> Callable[[Envelope[Message] | None,
                                                       CallFailed | None], None]:
        def callback(reply: Envelope[Message] | None, error: CallFailed | None) -> None:
            answer = reply.body if reply is not None else None
            if isinstance(answer, ErrorReply):
                error, answer = CallFailed(answer.code, answer.message), None
            self._consulted(consult, answer, None if error is None else str(error))

        return callback

    def _consulted(self, consult: Consult, answer: Message | None, why: str | None) -> None:
        decision = self.core.consulted(consult.replay_id, consult.token, answer, why,
                                       time.time())
        # A verdict or a route lets the replay run on: the hot path, as a report is.
        self._apply(decision)

    def on_claim(self, msg: ClaimAttempt, req: Incoming) -> Message:
        """The core's answer; a "not yet" is held until the verdict (held_claims.py)."""
        sender = req.agent or msg.machine_id
        reply = self._claim_now(msg, sender)
        return Deferred() if self._held_claims.hold(req, msg, sender, reply) else reply

    def _claim_now(self, msg: ClaimAttempt, sender: str) -> Message:
        return self.core.claim(msg, sender, time.time()).reply

    def _receipt(self, action_id: str, attempt_id: str) -> Callable[
            [Envelope[Message] | None, CallFailed | None], None]:
        def callback(reply: Envelope[Message] | None, error: CallFailed | None) -> None:
            body = reply.body if reply is not None else None
            if isinstance(body, ActionReceived):
                if attempt_id in self._underway:  # else no longer in flight
                    self._underway[attempt_id] = body.instance_id or ""
                return
            self._underway.pop(attempt_id, None)
            why = error if error is not None else getattr(body, "code", body)
            logger.info("dispatcher: no receipt for {} ({}); the watchdog will decide",
                        action_id, why)

        return callback


def _open_store(settings: Settings) -> DispatcherStore:
    """The store the settings name (store/open.py), once this process leads (on PostgreSQL);
    a database out of reach ends the process (actors/store_exits.py). A lost connection
    stops it at once: what it holds in memory may be ahead of what is committed, and it
    restarts from what the database holds."""
    return open_or_exit("dispatcher", lambda: open_store(
        settings, exit_on_loss("dispatcher"), lambda db: wait_to_lead(settings, db)),
        StoreUnavailable)


def _ignore(_reply: Envelope[Message] | None, _error: CallFailed | None) -> None:
    """Watchdog bookkeeping: if it is down, it rebuilds its table from us when it returns."""

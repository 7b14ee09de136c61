"""The dispatcher actor process: the thin shell around :class:`DispatcherCore`.

For every request: decode, call the core, commit the changed replays and the effects that
nothing else would bring back (the outbox, store.OUTBOX_EFFECTS) in one SQLite transaction,
reply, then perform the effects. A crash between commit and perform re-performs the pending
outbox at start (receivers dedupe), and re-sends the in-flight actions with new attempt ids.

Who sent a request (DESIGN.md §9): an agent that came in with CURVE is known by the identity
the broker authenticated (``Incoming.identity``); it may only report, claim, tell progress and
say hello, each for its own machine, and anything else it asks (a replay control command) is
refused ``forbidden`` (agents report; people control). Every refusal is an audit record.
Without CURVE (loopback, SSH tunnel) nothing tells peers apart: the body's ``machine_id``
stands for the sender, and local peers are trusted operators.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from loguru import logger

from actors.audit_sender import AuditSender
from actors.base import Actor, Incoming, MachineOf
from actors.dispatcher import rules
from actors.dispatcher.audit_records import outbox_records
from actors.dispatcher.core import DispatcherCore
from actors.dispatcher.effects import (
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
from actors.dispatcher.engine import Tx
from actors.dispatcher.loop_batch import LoopBatcher
from actors.dispatcher.settings import config_from_env
from actors.dispatcher.state import DispatcherConfig
from actors.dispatcher.store import DispatcherStore
from broker.client import CallFailed
from broker.config import Settings
from messages import events
from messages.base import Message
from messages.codec import Envelope, decode, encode, new_id
from messages.control import ErrorReply, Ping
from messages.dispatch import (
    ActionProgress,
    ActionReport,
    AgentHello,
    ClaimAttempt,
    ListInFlight,
    OrphanGiveUp,
    OrphanResend,
    Track,
    TrackBatch,
    Untrack,
)
from messages.replay import (
    CancelReplay,
    GetReplayStatus,
    PauseReplay,
    ResumeReplay,
    StartReplay,
)

_C = TypeVar("_C", StartReplay, ResumeReplay, PauseReplay, CancelReplay)

# Acknowledged outbox rows are deleted in batches, in the next transaction or on a timer: a
# crash before that only sends their records again, which audit_log stores once.
_FLUSH_SENT_S = 0.2
# Track / Untrack go to the watchdog together in one TrackBatch this often, not as two round
# trips per step (those were ~40% of the tree's CPU per step, bench/turnaround.py): its
# timers run for tens of seconds.
_WATCHDOG_BATCH_S = 0.1
_AUDIT_S = 0.05
"""How often audit records committed since are sent (a batch at a time; an ack sends the next
batch at once only when the last one was full)."""


def _machine(msg: Any) -> str:
    return str(msg.machine_id)


# Named in an audit record of a refused request, when the request has them.
_REFUSAL_FIELDS = ("replay_id", "machine_id", "action_id", "attempt_id", "operator")


class DispatcherActor(Actor):
    """Owns replays, their queues and in-flight actions, and the state machine of spec/03."""

    service = "dispatcher"
    # A report is let through whatever machine it names: the core refuses it and keeps it in
    # the reports log (core.report). Control commands are not here: people control.
    agent_requests: ClassVar[Mapping[type[Message], MachineOf | None]] = {
        Ping: None, ActionReport: None, ClaimAttempt: _machine,
        ActionProgress: _machine, AgentHello: _machine}

    def __init__(self, settings: Settings, config: DispatcherConfig | None = None) -> None:
        super().__init__(settings)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = DispatcherStore.in_dir(settings.data_dir)
        self.core = DispatcherCore(config or config_from_env(), new_id, self.store.load())
        self._sent: list[int] = []
        self._watchdog: list[Track | Untrack] = []
        self.handle(StartReplay, self._once(lambda m: self.core.start(m, time.time())))
        self.handle(GetReplayStatus, lambda m, _r: self.core.status(m).reply)
        self.handle(ResumeReplay, self._once(lambda m: self.core.resume(m, time.time())))
        self.handle(PauseReplay, self._once(self.operator_pause))
        self.handle(CancelReplay, self._once(lambda m: self.core.cancel(m, time.time())))
        self.handle(ActionReport, self.on_report)
        # The authenticated sender if there is one (CURVE), else the body's machine_id.
        self.handle(ClaimAttempt,
                    lambda m, r: self.core.claim(m, r.identity or m.machine_id,
                                                 time.time()).reply)
        self.handle(ActionProgress,
                    lambda m, r: self._apply(self.core.progress(m, r.identity or m.machine_id,
                                                                time.time()), durable=False))
        self.handle(AgentHello,
                    lambda m, _r: self._apply(self.core.agent_hello(m, time.time())))
        self.handle(ListInFlight, lambda _m, _r: self.core.inflight().reply)
        self.handle(OrphanResend,
                    lambda m, _r: self._apply(self.core.orphan_resend(m, time.time())))
        self.handle(OrphanGiveUp,
                    lambda m, _r: self._apply(self.core.orphan_giveup(m, time.time())))
        # A lambda: self._sent is a new list after each commit.
        self.loop = LoopBatcher(
            lambda service, message, callback, timeout_s: self.call(
                service, message, callback, timeout_s=timeout_s, retries=0),
            self._consulted)
        self.audit = AuditSender(outbox_records(self.store), self.call,
                                 lambda ids: self._sent.extend(ids), label=self.service)
        self.every(_FLUSH_SENT_S, lambda _now: self._flush_sent())
        self.every(_AUDIT_S, self.audit.tick)
        self.every(_WATCHDOG_BATCH_S, lambda _now: self._flush_watchdog())

    def on_start(self) -> None:
        decision = self.core.recover(time.time())
        if decision.effects:
            logger.info("dispatcher: recovered, re-sending {} in-flight action(s)",
                        sum(isinstance(e, SendToAgent) for e in decision.effects))
        self._apply(decision)

    def on_stop(self) -> None:
        # A watchdog batch not sent yet is not lost: at the start every in-flight action is
        # re-sent, tracked again under its new attempt id.
        self._flush_sent()
        self.store.close()

    def operator_pause(self, msg: PauseReplay) -> Decision:
        """Operator pause (D8): from the next step; the action in flight is not cancelled."""
        text = rules.operator_pause_message(msg.operator, msg.message)
        return self.core.pause(msg.replay_id, rules.OPERATOR, text, time.time(),
                               detail={"operator": msg.operator, **msg.by()})

    def on_report(self, msg: ActionReport, req: Incoming) -> Message:
        # The authenticated sender if there is one (CURVE), else the body's machine_id.
        sender = req.identity or msg.machine_id
        decision = self.core.report(msg, sender, time.time())
        if isinstance(decision.reply, ErrorReply):  # refused: recorded by the core
            self.publish(events.SENDER_REFUSED, service=self.service, type=msg.type_name,
                         identity=req.identity, sender_machine=sender, code=decision.reply.code,
                         message=decision.reply.message)
        return self._apply(decision, durable=not self._settled(decision))

    def _settled(self, decision: Decision) -> bool:
        """The hot path: a decision whose replays run on or complete is committed without an
        fsync (store.py says why that loses nothing); one that pauses a replay is durable."""
        replays = self.core.replays
        return all(replays[i].status in ("running", "completed")
                   for i in decision.changed if i in replays)

    def refuse_sender(self, msg: Message, req: Incoming, code: str, text: str) -> Message:
        """As every actor does (log, ``lea:sender_refused``), and an audit record."""
        reply = super().refuse_sender(msg, req, code, text)
        tx = Tx(time.time())
        tx.audit("request_refused", type=msg.type_name, code=code, identity=req.identity,
                 message=text, **{k: getattr(msg, k) for k in _REFUSAL_FIELDS
                                  if isinstance(getattr(msg, k, None), str)})
        return self._apply(tx.done(reply))

    # The shell ------------------------------------------------------------------------------

    def _once(self, decide: Callable[[_C], Decision]) -> Callable[[_C, Incoming], Message]:
        """A control request applied at most once per envelope id.

        A client retries with the same envelope id (Lazy Pirate), and the broker keeps a
        request queued while we are down: both copies may reach us, and a second StartReplay
        would run the workflow twice (a second ResumeReplay could answer a newer pause
        nobody has seen). The reply is committed with the decision; a copy gets it again.
        """
        def handler(msg: _C, req: Incoming) -> Message:
            kind = type(msg).__name__
            done = self.store.reply_for(req.id, kind)
            if done is not None:
                logger.warning("dispatcher: {} {} already applied: answering it again", kind,
                               req.id)
                return decode(done).body
            return self._apply(decide(msg), (req.id, kind))

        return handler

    def _apply(self, decision: Decision, request: tuple[str, str] | None = None, *,
               durable: bool = True) -> Message:
        """Commit, then perform; returns the reply. Nothing is sent before the commit.

        ``request`` ``(envelope id, kind)``: a control request, recorded with its reply.
        ``durable=False``: no fsync for this commit (see store.py).
        """
        if not decision.changed and not decision.effects:
            return decision.reply
        record = None if request is None else (*request, encode(decision.reply, request[0]))
        # The rows performed since the last commit are deleted in this one: no transaction
        # of their own while busy (the timer flushes them when idle).
        self.store.commit_decision(self.core.replays, decision, record, durable=durable,
                                   sent=self._sent)
        self._sent = []
        # Dispatches first (a stable sort): an agent is waiting for them, the bus and the
        # bookkeeping are not. The store wrote the reports log; audit records wait in the
        # outbox for the AuditSender.
        for effect in sorted(decision.effects, key=lambda e: not isinstance(e, SendToAgent)):
            if not isinstance(effect, RecordReport | AuditRecord):
                self._perform(effect)
        return decision.reply

    def _flush_sent(self) -> None:
        if self._sent:
            sent, self._sent = self._sent, []
            self.store.mark_sent(sent)

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
        elif isinstance(effect, SendToAgent):
            # No transport retry: a lost dispatch is the watchdog's and the hello's business,
            # and each resend must carry a new attempt_id (spec/03 §4.3).
            self.call(f"agent.{effect.machine_id}", effect.message,
                      _log_failure(effect.message.action.action_id), timeout_s=10.0,
                      retries=0)
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
        self._apply(decision, durable=not self._settled(decision))


def _ignore(_reply: Envelope[Message] | None, _error: CallFailed | None) -> None:
    """Watchdog bookkeeping: if it is down, it rebuilds its table from us when it returns."""


def _log_failure(action_id: str) -> Callable[[Envelope[Message] | None, CallFailed | None],
                                             None]:
    def callback(_reply: Envelope[Message] | None, error: CallFailed | None) -> None:
        if error is not None:
            logger.info("dispatcher: no receipt for {} ({}); the watchdog will decide",
                        action_id, error)

    return callback

"""The dispatcher actor process: the thin shell around :class:`DispatcherCore`.

For every request: decode, call the core, commit the changed replays and the effects in one
SQLite transaction (the outbox), reply, then perform the effects. A crash between commit and
perform re-performs the pending outbox at start; receivers dedupe (the agent by its ledger,
the watchdog by attempt). On start the in-flight actions are re-sent with new attempt ids.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from loguru import logger

from actors.base import Actor, Incoming
from actors.dispatcher.core import DispatcherCore
from actors.dispatcher.effects import (
    AuditRecord,
    Decision,
    Effect,
    NotifyAgentPaused,
    PublishEvent,
    SendToAgent,
    TrackInFlight,
    UntrackInFlight,
)
from actors.dispatcher.state import DispatcherConfig
from actors.dispatcher.store import DispatcherStore
from broker.client import CallFailed
from broker.config import Settings
from messages.base import Message
from messages.codec import Envelope
from messages.dispatch import (
    ActionReport,
    AgentHello,
    ListInFlight,
    OrphanGiveUp,
    OrphanResend,
    Track,
    Untrack,
)
from messages.replay import CancelReplay, GetReplayStatus, ResumeReplay, StartReplay

# Performed outbox rows are deleted in batches, in the next transaction or on a timer: a
# crash before that only re-performs effects, which every receiver deduplicates.
_FLUSH_SENT_S = 0.2


def _new_id() -> str:
    return uuid.uuid4().hex


class DispatcherActor(Actor):
    """Owns replays, their queues and in-flight actions, and the state machine of spec/03."""

    service = "dispatcher"

    def __init__(self, settings: Settings, config: DispatcherConfig | None = None) -> None:
        super().__init__(settings)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = DispatcherStore.in_dir(settings.data_dir)
        self.core = DispatcherCore(config or DispatcherConfig(), _new_id, self.store.load())
        self._sent: list[int] = []
        self.handle(StartReplay, lambda m, _r: self._apply(self.core.start(m, time.time())))
        self.handle(GetReplayStatus, lambda m, _r: self.core.status(m).reply)
        self.handle(ResumeReplay, lambda m, _r: self._apply(self.core.resume(m, time.time())))
        self.handle(CancelReplay, lambda m, _r: self._apply(self.core.cancel(m, time.time())))
        self.handle(ActionReport, self.on_report)
        self.handle(AgentHello,
                    lambda m, _r: self._apply(self.core.agent_hello(m, time.time())))
        self.handle(ListInFlight, lambda _m, _r: self.core.inflight().reply)
        self.handle(OrphanResend,
                    lambda m, _r: self._apply(self.core.orphan_resend(m, time.time())))
        self.handle(OrphanGiveUp,
                    lambda m, _r: self._apply(self.core.orphan_giveup(m, time.time())))
        self.every(_FLUSH_SENT_S, lambda _now: self._flush_sent())

    def on_start(self) -> None:
        pending = self.store.pending_outbox()
        if pending:
            logger.info("dispatcher: performing {} effect(s) left in the outbox", len(pending))
            for outbox_id, effect in pending:
                self._perform(effect)
                self._sent.append(outbox_id)
        decision = self.core.recover(time.time())
        if decision.effects:
            logger.info("dispatcher: recovered, re-sending {} in-flight action(s)",
                        sum(isinstance(e, SendToAgent) for e in decision.effects))
        self._apply(decision)

    def on_stop(self) -> None:
        self._flush_sent()
        self.store.close()

    def on_report(self, msg: ActionReport, _req: Incoming) -> Message:
        # The transport sender is not authenticated yet: the body's machine_id stands for it.
        return self._apply(self.core.report(msg, msg.machine_id, time.time()))

    # The shell ------------------------------------------------------------------------------

    def _apply(self, decision: Decision) -> Message:
        """Commit, then perform; returns the reply. Nothing is sent before the commit."""
        if not decision.changed and not decision.effects:
            return decision.reply
        written = self.store.commit_decision(self.core.replays, decision)
        for outbox_id, effect in written:
            self._perform(effect)
            self._sent.append(outbox_id)
        return decision.reply

    def _flush_sent(self) -> None:
        if self._sent:
            sent, self._sent = self._sent, []
            self.store.mark_sent(sent)

    def _perform(self, effect: Effect) -> None:
        if isinstance(effect, SendToAgent):
            # No transport retry: a lost dispatch is the watchdog's and the hello's business,
            # and each resend must carry a new attempt_id (spec/03 §4.3).
            self.call(f"agent.{effect.machine_id}", effect.message,
                      _log_failure(effect.message.action.action_id), timeout_s=10.0,
                      retries=0)
        elif isinstance(effect, TrackInFlight):
            self.call("watchdog", Track(entry=effect.entry), _ignore, timeout_s=2.0,
                      retries=2)
        elif isinstance(effect, UntrackInFlight):
            self.call("watchdog", Untrack(action_id=effect.action_id,
                                          attempt_id=effect.attempt_id),
                      _ignore, timeout_s=2.0, retries=2)
        elif isinstance(effect, PublishEvent):
            self.publish(effect.topic, **effect.data)
        elif isinstance(effect, NotifyAgentPaused | AuditRecord):
            pass  # consumers arrive with the agent's pause bubble and the audit_log actor


def _ignore(_reply: Envelope[Message] | None, _error: CallFailed | None) -> None:
    """Watchdog bookkeeping: if it is down, it rebuilds its table from us when it returns."""


def _log_failure(action_id: str) -> Callable[[Envelope[Message] | None, CallFailed | None],
                                             None]:
    def callback(_reply: Envelope[Message] | None, error: CallFailed | None) -> None:
        if error is not None:
            logger.info("dispatcher: no receipt for {} ({}); the watchdog will decide",
                        action_id, error)

    return callback

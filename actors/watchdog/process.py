"""The watchdog actor process: keeps the timers, asks the dispatcher about orphans.

After its own restart it rebuilds its table from the dispatcher (``ListInFlight``), so no
orphan is missed; until that answer arrives it keeps asking.
"""

from __future__ import annotations

import time

from loguru import logger

from actors.base import Actor, Incoming
from actors.watchdog.core import WatchdogConfig, WatchdogCore
from messages.base import Message
from messages.codec import Envelope
from messages.dispatch import (
    InFlightList,
    ListInFlight,
    ListTracked,
    OrphanGiveUp,
    OrphanResend,
    Track,
    TrackBatch,
    Untrack,
)
from messages.replay import Ack
from runtime.settings import Settings
from transport.client import Callback, CallFailed


class WatchdogActor(Actor):
    """Timers of in-flight actions; it calls the dispatcher to resend or give up."""

    service = "watchdog"

    def __init__(self, settings: Settings, config: WatchdogConfig | None = None) -> None:
        super().__init__(settings)
        self.config = config or WatchdogConfig()
        self.core = WatchdogCore(self.config)
        self.rebuilt = False
        self._asking = False
        self.handle(Track, self.on_track)
        self.handle(Untrack, self.on_untrack)
        self.handle(TrackBatch, self.on_batch)
        self.handle(ListTracked, lambda _m, _r: InFlightList(entries=self.core.entries()))
        self.every(self.config.scan_interval_s, self.scan)
        self.every(1.0, self.ask_for_inflight)

    def on_start(self) -> None:
        logger.info("watchdog: {}", self.config)
        self.ask_for_inflight(time.monotonic())

    def on_track(self, msg: Track, _req: Incoming) -> Message:
        self.core.track(msg.entry, time.monotonic())
        return Ack()

    def on_untrack(self, msg: Untrack, _req: Incoming) -> Message:
        return Ack(status="ok" if self.core.untrack(msg.action_id, msg.attempt_id)
                   else "not_tracked")

    def on_batch(self, msg: TrackBatch, _req: Incoming) -> Message:
        """Tracks and untracks applied in the dispatcher's order."""
        now = time.monotonic()
        untracked = 0
        for update in msg.updates:
            if isinstance(update, Track):
                self.core.track(update.entry, now)
            else:
                untracked += self.core.untrack(update.action_id, update.attempt_id)
        return Ack(detail={"updates": len(msg.updates), "untracked": untracked})

    def ask_for_inflight(self, _now: float) -> None:
        if self.rebuilt or self._asking:
            return

        def rebuilt(reply: Envelope[Message] | None, error: CallFailed | None) -> None:
            self._asking = False
            if reply is None or not isinstance(reply.body, InFlightList):
                logger.warning("watchdog: no in-flight list from the dispatcher yet ({})", error)
                return
            self.core.rebuild(reply.body.entries, time.monotonic(), time.time())
            self.rebuilt = True
            logger.info("watchdog: tracking {} in-flight action(s)", len(self.core))

        self._asking = True
        self.call("dispatcher", ListInFlight(), rebuilt, timeout_s=2.0, retries=1)

    def scan(self, now: float) -> None:
        for question in self.core.scan(now):
            logger.info("watchdog: {} (attempt {}) timed out: asking the dispatcher ({})",
                        question.action_id, question.attempt_id, question.type_name)
            self.call("dispatcher", question, self._answered(question), timeout_s=5.0,
                      retries=2)

    def _answered(self, question: OrphanResend | OrphanGiveUp) -> Callback:
        def callback(reply: Envelope[Message] | None, error: CallFailed | None) -> None:
            if reply is None:
                logger.warning("watchdog: dispatcher did not answer about {} ({})",
                               question.action_id, error)
                self.core.unanswered(question.action_id, question.attempt_id)
            else:
                # Whatever it did (resent under a new attempt, gave up, or found the attempt
                # already finished), this attempt's timer is over.
                self.core.untrack(question.action_id, question.attempt_id)

        return callback

"""Keeps the replay list current and pushes every change to the open pages.

A bus event naming a replay marks it dirty; shortly after (bursts are gathered), its summary
is asked of the dispatcher and the rows that changed go to every stream. The bus is lossy
and the console may start after the replays did, so every :data:`FULL_REFRESH_S` the whole
list is asked again: a lost event costs at most that delay, never a wrong screen. A replay
already under way when the console started gets its "last event" from the audit trail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from loguru import logger

from console import labels
from console.board import Board
from console.broker_link import BrokerLink
from console.bus_feed import Hub
from console.trail import TrailCache
from console.views import ACTIVE
from messages.events import Event
from messages.replay import GetReplayStatus, ReplayStatusReply, ReplaySummary
from transport.client import CallFailed

FULL_REFRESH_S = 5.0
GATHER_S = 0.05
"""How long a burst of events is gathered before the dispatcher is asked."""
MAX_SINGLE = 8
"""More dirty replays than this at once: ask for the whole list in one call."""
BACKFILL_MAX = 20
"""Replays whose last event is read from the audit trail at once."""


class Live:
    def __init__(self, link: BrokerLink, board: Board, hub: Hub, trail: TrailCache,
                 on_summaries: Callable[[list[ReplaySummary], bool], None] | None = None
                 ) -> None:
        self.link = link
        # Told every list of summaries, and whether it is the whole list (the metrics).
        self._on_summaries = on_summaries
        self.board = board
        self.hub = hub
        self.trail = trail
        self._backfilled: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.dispatcher = "unknown"  # "ok" / "unreachable": shown by the pages
        self.ready = asyncio.Event()  # set after the first answer (or failure)
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._full_due = 0.0

    def on_event(self, event: Event) -> None:
        """A bus event (in the loop): note it, tell the pages, and refresh its replay."""
        replay_id = self.board.note(event)
        if replay_id is None:
            return
        text = labels.happening(event.topic, event.data)
        self.hub.publish("event", {"replay_id": replay_id, "topic": event.topic,
                                   "at": event.at, "text": text})
        changed = self.board.refresh_event(replay_id)
        if changed is not None:
            self.hub.publish("replay", changed.model_dump(mode="json"))
        self.mark(replay_id)

    def mark(self, replay_id: str | None = None) -> None:
        """Refresh ``replay_id`` soon (None: the whole list)."""
        if replay_id is None:
            self._full_due = 0.0
        else:
            self._dirty.add(replay_id)
        self._wake.set()

    def apply(self, summaries: list[ReplaySummary], full: bool = False) -> None:
        if self._on_summaries is not None:
            self._on_summaries(summaries, full)
        for changed in self.board.apply(summaries):
            self.hub.publish("replay", changed.model_dump(mode="json"))
        todo = [s.replay_id for s in summaries if s.status in ACTIVE
                and s.replay_id not in self._backfilled and not self.board.has_last(s.replay_id)]
        if todo:
            self._backfilled.update(todo[:BACKFILL_MAX])
            task = asyncio.create_task(self._backfill(todo[:BACKFILL_MAX]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _backfill(self, replay_ids: list[str]) -> None:
        for replay_id in replay_ids:
            try:
                records = await self.trail.records(replay_id)
            except CallFailed:
                self._backfilled.discard(replay_id)  # another refresh will try again
                continue
            if records:
                last = records[-1]
                self.board.remember(replay_id, last.kind, last.data, last.at)
                changed = self.board.refresh_event(replay_id)
                if changed is not None:
                    self.hub.publish("replay", changed.model_dump(mode="json"))

    async def run(self) -> None:
        """The refresh loop, until cancelled."""
        while True:
            wait = max(0.0, self._full_due - time.monotonic())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=wait)
            except TimeoutError:
                pass
            self._wake.clear()
            await asyncio.sleep(GATHER_S)
            dirty, self._dirty = self._dirty, set()
            full = time.monotonic() >= self._full_due or len(dirty) > MAX_SINGLE
            try:
                summaries = await self._fetch(None if full else dirty)
            except CallFailed as exc:
                self._set_dispatcher("unreachable", str(exc))
                self._dirty |= dirty
                self._full_due = time.monotonic() + 1.0  # try again soon
                self.ready.set()
                continue
            self._set_dispatcher("ok")
            if full:
                self._full_due = time.monotonic() + FULL_REFRESH_S
            self.apply(summaries, full)
            self.ready.set()

    async def _fetch(self, replay_ids: set[str] | None) -> list[ReplaySummary]:
        if replay_ids is None:
            return await self.status(None)
        out: list[ReplaySummary] = []
        for replay_id in sorted(replay_ids):
            try:
                out.extend(await self.status(replay_id))
            except CallFailed as exc:
                if exc.code != "not_found":
                    raise
        return out

    async def status(self, replay_id: str | None) -> list[ReplaySummary]:
        """The dispatcher's summaries (one replay, or all); raises CallFailed."""
        reply = await self.link.call("dispatcher", GetReplayStatus(replay_id=replay_id),
                                     timeout_s=3.0, retries=1)
        if not isinstance(reply, ReplayStatusReply):
            raise CallFailed("unexpected_reply", f"dispatcher answered {reply.type_name}")
        return list(reply.replays)

    def _set_dispatcher(self, state: str, why: str = "") -> None:
        if state != self.dispatcher:
            if state == "unreachable":
                logger.warning("console: the dispatcher does not answer ({})", why)
            elif self.dispatcher == "unreachable":
                logger.info("console: the dispatcher answers again")
            self.dispatcher = state
            self.hub.publish("status", {"dispatcher": state})

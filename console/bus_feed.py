"""Bus events into the event loop: a thread reads ``lea:*`` with the project's Subscriber and
hands each event to the loop; :class:`Hub` fans messages out to the open SSE streams.

The bus is lossy by design (docs/protocol.md), and so is this: a stream whose browser reads too
slowly loses its queue and is told to reload everything (``resync``), rather than holding
the console's memory hostage.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import zmq
from loguru import logger

from messages.events import TOPIC_PREFIX, Event
from transport.bus import Subscriber

STREAM_QUEUE = 256
"""Messages a stream may lag behind before it is dropped and told to resync."""


class BusFeed:
    """Calls ``on_event(event)`` in ``loop`` for every bus event, from a reader thread."""

    def __init__(self, endpoint: str, loop: asyncio.AbstractEventLoop,
                 on_event: Callable[[Event], None]) -> None:
        self.endpoint = endpoint
        self._loop = loop
        self._on_event = on_event
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-bus", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        ctx: zmq.Context[Any] = zmq.Context()
        sub = Subscriber(ctx, self.endpoint, TOPIC_PREFIX)
        try:
            while not self._stop.is_set():
                event = sub.recv(timeout_s=0.25)
                if event is not None:
                    self._loop.call_soon_threadsafe(self._deliver, event)
        except Exception:  # the loop closing under us at shutdown, or a bug: say so
            if not self._stop.is_set():
                logger.exception("console: the bus reader stopped")
        finally:
            sub.close()
            ctx.term()

    def _deliver(self, event: Event) -> None:
        try:
            self._on_event(event)
        except Exception:
            logger.exception("console: handling {} failed", event.topic)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)


class Hub:
    """Open SSE streams; ``publish`` never blocks (a lagging stream is told to resync)."""

    def __init__(self) -> None:
        self._streams: set[asyncio.Queue[tuple[str, Any] | None]] = set()

    def open(self) -> asyncio.Queue[tuple[str, Any] | None]:
        q: asyncio.Queue[tuple[str, Any] | None] = asyncio.Queue(STREAM_QUEUE)
        self._streams.add(q)
        return q

    def close(self, q: asyncio.Queue[tuple[str, Any] | None]) -> None:
        self._streams.discard(q)

    def publish(self, event: str, data: Any) -> None:
        for q in list(self._streams):
            try:
                q.put_nowait((event, data))
            except asyncio.QueueFull:
                self._streams.discard(q)
                _replace_with_resync(q)

    def shutdown(self) -> None:
        """End every stream (the server is stopping)."""
        for q in list(self._streams):
            _replace_with_resync(q, final=True)
        self._streams.clear()

    @property
    def streams(self) -> int:
        return len(self._streams)


def _replace_with_resync(q: asyncio.Queue[tuple[str, Any] | None], final: bool = False) -> None:
    """Empty ``q`` and leave a resync (then the end) in it."""
    while not q.empty():
        q.get_nowait()
    q.put_nowait(("resync", {"reason": "server_stopping" if final else "too_slow"}))
    q.put_nowait(None)

"""What every actor process shares: its MDP worker, an MDP client, the bus, timers, shutdown.

An actor subclass names its ``service`` and registers handlers; the loop here only receives,
decodes, calls the handler and replies. Bad input never escapes a handler: it becomes an
:class:`~messages.ErrorReply` and a ``lea:bad_message`` event.
"""

from __future__ import annotations

import heapq
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, ClassVar, TypeVar, cast

import zmq
from loguru import logger

from broker.bus import Publisher
from broker.client import Callback, Client
from broker.config import Settings
from broker.worker import Request, Worker, answer
from messages import events
from messages.base import Message
from messages.codec import Envelope
from messages.control import ErrorReply, Ping, Pong
from supervision.liveness import Beacon

M = TypeVar("M", bound=Message)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request being served: its envelope id and the MDP address of the client."""

    id: str
    client: bytes


Handler = Callable[[Any, Incoming], Message]


class Actor:
    """Base of the six actors; ``run()`` serves until SIGTERM / SIGINT and returns 0."""

    service: ClassVar[str] = ""

    def __init__(self, settings: Settings) -> None:
        if not self.service:
            raise TypeError(f"{type(self).__name__} must set a service name")
        self.settings = settings
        self.started_at = time.time()
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.worker = Worker(self.ctx, settings.mdp_endpoint, self.service,
                             settings.heartbeat_interval_s, settings.heartbeat_liveness)
        self.client = Client(self.ctx, settings.mdp_endpoint)
        self.bus = Publisher(self.ctx, settings.bus_in_endpoint, source=self.service)
        self.beacon = Beacon.from_env()
        self._handlers: dict[type[Message], Handler] = {}
        self._timers: list[tuple[float, int, float, Callable[[float], None]]] = []
        self._extra: dict[zmq.Socket[bytes], Callable[[], None]] = {}
        self._stopping = False
        self.handle(Ping, self.on_ping)

    # Registration -------------------------------------------------------------------------

    def handle(self, kind: type[M], handler: Callable[[M, Incoming], Message]) -> None:
        """Serve requests whose body is a ``kind`` with ``handler``."""
        self._handlers[kind] = cast(Handler, handler)

    def every(self, interval_s: float, callback: Callable[[float], None]) -> None:
        """Call ``callback(now)`` every ``interval_s`` seconds from the loop."""
        heapq.heappush(self._timers, (time.monotonic() + interval_s, len(self._timers),
                                      interval_s, callback))

    def watch(self, sock: zmq.Socket[bytes], on_readable: Callable[[], None]) -> None:
        """Poll another socket in the loop."""
        self._extra[sock] = on_readable

    def call(self, service: str, message: Message, callback: Callback,
             timeout_s: float = 2.5, retries: int = 2) -> str:
        """Call another service without blocking the loop."""
        return self.client.call(service, message, callback, timeout_s, retries)

    def publish(self, topic: str, **data: Any) -> None:
        self.bus.publish(topic, **data)

    # Hooks ----------------------------------------------------------------------------------

    def on_start(self) -> None:
        """Called once before serving."""

    def on_stop(self) -> None:
        """Called once after the loop ends."""

    def on_ping(self, _msg: Ping, _req: Incoming) -> Message:
        return Pong(service=self.service, pid=os.getpid(), started_at=self.started_at)

    # Serving --------------------------------------------------------------------------------

    def serve(self, request: Request) -> bytes:
        """The encoded reply to one request; never raises."""
        return answer(request, lambda envelope: self._dispatch(envelope, request.client),
                      self.settings.max_message_bytes, self._refused)

    def _dispatch(self, envelope: Envelope[Message], client: bytes) -> Message:
        handler = self._handlers.get(type(envelope.body))
        if handler is None:
            return ErrorReply(code="unsupported_type",
                              message=f"{self.service} does not handle {envelope.type!r}")
        return handler(envelope.body, Incoming(envelope.id, client))

    def _refused(self, reason: str, detail: str) -> None:
        self.publish(events.BAD_MESSAGE, service=self.service, reason=reason,
                     detail=detail[:500])

    def _stop(self, signum: int, _frame: FrameType | None) -> None:
        logger.info("{}: got signal {}, stopping", self.service, signal.Signals(signum).name)
        self._stopping = True

    def stop(self) -> None:
        self._stopping = True

    def _run_timers(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            _due, seq, interval, callback = heapq.heappop(self._timers)
            try:
                callback(now)
            except Exception:
                logger.exception("{}: timer failed", self.service)
            heapq.heappush(self._timers, (now + interval, seq, interval, callback))

    def _timeout_ms(self, now: float) -> int:
        deadlines = [self.worker.next_deadline(), now + 0.25]
        if (client_deadline := self.client.next_deadline()) is not None:
            deadlines.append(client_deadline)
        if self._timers:
            deadlines.append(self._timers[0][0])
        return max(0, int((min(deadlines) - now) * 1000) + 1)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        logger.info("{}: serving on {}", self.service, self.settings.mdp_endpoint)
        self.on_start()
        poller, polled = zmq.Poller(), None
        try:
            while not self._stopping:
                sockets = (self.worker.socket, self.client.socket, *self._extra)
                if sockets != polled:
                    poller, polled = zmq.Poller(), sockets
                    for sock in sockets:
                        poller.register(sock, zmq.POLLIN)
                ready = dict(poller.poll(self._timeout_ms(time.monotonic())))
                if self.worker.socket in ready:
                    for request in self.worker.drain():
                        self.worker.reply(request, self.serve(request))
                if self.client.socket in ready:
                    self.client.drain()
                for sock, on_readable in list(self._extra.items()):
                    if sock in ready:
                        on_readable()
                now = time.monotonic()
                self.worker.tick(now)
                self.client.tick(now)
                self._run_timers(now)
                self.beacon.beat()
        finally:
            self.on_stop()
            self.worker.close()
            self.client.close()
            self.bus.close()
            for sock in self._extra:
                sock.close(0)
            self.ctx.term()
        logger.info("{}: stopped", self.service)
        return 0

"""What every actor process shares: its MDP worker, an MDP client, the bus, timers, shutdown.

An actor subclass names its ``service`` and registers handlers; the loop here only receives,
decodes, calls the handler and replies. Bad input never escapes a handler: it becomes an
:class:`~messages.ErrorReply` and a ``lea:bad_message`` event.

Who may ask what (docs/protocol.md, "CURVE and identity"): a peer of the plain loopback endpoint (an
actor, the command line) is trusted. A peer the broker authenticated with CURVE is an agent, named
by its identity (:attr:`Incoming.identity`); it may send only the types in
:attr:`Actor.agent_requests`, and only for its own machine. Anything else is refused
(``forbidden`` / ``wrong_machine``) with a ``lea:sender_refused`` event.
"""

from __future__ import annotations

import heapq
import os
import queue
import signal
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import FrameType
from typing import Any, ClassVar, TypeVar, cast

import zmq
from loguru import logger

from messages import events
from messages.base import Message
from messages.codec import Envelope, encode
from messages.control import ErrorReply, Ping, Pong
from runtime.liveness import Beacon
from runtime.rate_limit import RateLimit
from runtime.settings import Settings
from transport.bus import Publisher
from transport.client import Callback, Client
from transport.peer_id import identity_of
from transport.worker import Request, Worker, answer

M = TypeVar("M", bound=Message)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request being served: its envelope id, the MDP address of the client, and who sent
    it: the identity the broker authenticated (CURVE, transport/peer_id.py), or None for a peer
    of the plain loopback endpoint (a local actor or command line: trusted)."""

    id: str
    client: bytes
    identity: str | None = None
    worker: int = 0
    """Which of the actor's worker connections it came on (the reply goes back there)."""


Handler = Callable[[Any, Incoming], Message]
MachineOf = Callable[[Any], str]
"""The machine a message speaks for (its ``machine_id``)."""


class Deferred(Message, type_name="actor.deferred"):
    """What a handler returns when :meth:`Actor.defer` answers later; never sent."""


@dataclass(frozen=True, slots=True)
class _Done:
    """A deferred job's outcome, handed from its worker thread to the loop."""

    req: Incoming
    reply: Message
    then: Callable[[Message], None] | None
    failure: str | None  # repr of the exception when the job raised


class Actor:
    """Base of the six actors; ``run()`` serves until SIGTERM / SIGINT and returns 0."""

    service: ClassVar[str] = ""
    deferred_workers: ClassVar[int] = 4  # threads for :meth:`defer` jobs
    worker_connections: ClassVar[int] = 1
    """MDP worker connections to the broker for the service. The broker hands each one a
    request only once its last is answered (RFC 18), so an actor that answers a loop turn's
    requests together, after one fsync for all of them (the dispatcher: docs/durability.md),
    needs several to have several requests in a turn."""
    agent_requests: ClassVar[Mapping[type[Message], MachineOf | None]] = {Ping: None}
    """What an authenticated peer (an agent) may send: each type with the machine its body
    speaks for, which must be the sender's identity (None: no machine in it)."""

    def __init__(self, settings: Settings) -> None:
        if not self.service:
            raise TypeError(f"{type(self).__name__} must set a service name")
        self.settings = settings
        self.started_at = time.time()
        self.ctx: zmq.Context[Any] = zmq.Context()
        # The tree's own door: the only one its services may be served from (tree_door.py).
        self.workers = [Worker(self.ctx, settings.tree_mdp_endpoint, self.service,
                               settings.heartbeat_interval_s, settings.heartbeat_liveness)
                        for _ in range(max(1, self.worker_connections))]
        self.worker = self.workers[0]
        self._serving = 0  # index of the worker connection whose request is being served
        self.client = Client(self.ctx, settings.tree_mdp_endpoint)
        self.bus = Publisher(self.ctx, settings.bus_in_endpoint, source=self.service)
        self.beacon = Beacon.from_env()
        self._handlers: dict[type[Message], Handler] = {}
        self._timers: list[tuple[float, int, float, Callable[[float], None]]] = []
        self._extra: dict[zmq.Socket[bytes], Callable[[], None]] = {}
        self._stopping = False
        self._held = False  # the request being served is answered later (defer)
        self._pool: ThreadPoolExecutor | None = None
        self._done: queue.SimpleQueue[_Done] = queue.SimpleQueue()
        self._doorbell = f"inproc://deferred-{id(self)}"
        self._bell: zmq.Socket[bytes] | None = None  # rung by worker threads when done
        self._refusal_log = RateLimit(2.0)  # a hostile peer must not flood the log
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

    def defer(self, req: Incoming, work: Callable[[], Message],
              then: Callable[[Message], None] | None = None) -> Deferred:
        """Answer ``req`` with ``work()`` run on a worker thread; a handler returns this.

        For a handler that must block (an HTTP call) without stopping the loop: heartbeats,
        the supervisor's beacon and other requests go on meanwhile. ``then(reply)`` runs on
        the loop thread just before the reply is sent (publish events there: sockets are
        not thread-safe). ``work`` must not touch the actor's sockets. A ``work`` that
        raises is answered like a raising handler: ErrorReply ``internal_error``.
        """
        if self._pool is None:
            self._bell = self.ctx.socket(zmq.PULL)
            self._bell.bind(self._doorbell)
            self.watch(self._bell, self._deliver_deferred)
            self._pool = ThreadPoolExecutor(self.deferred_workers,
                                            thread_name_prefix=f"{self.service}-deferred")
        self._pool.submit(self._run_deferred, req, work, then)
        return Deferred()

    def _run_deferred(self, req: Incoming, work: Callable[[], Message],
                      then: Callable[[Message], None] | None) -> None:
        """On a worker thread: do the work, queue the outcome, ring the loop's doorbell."""
        failure = None
        try:
            reply = work()
        except Exception as exc:
            logger.exception("{}: a deferred request failed", self.service)
            failure = repr(exc)
            reply = ErrorReply(code="internal_error", message=failure[:1000])
        self._done.put(_Done(req, reply, then, failure))
        try:
            bell: zmq.Socket[bytes] = self.ctx.socket(zmq.PUSH)
        except zmq.ZMQError:
            return  # the actor is stopping: nobody is left to answer
        try:
            bell.connect(self._doorbell)
            bell.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the loop still finds the outcome at its next turn
        finally:
            bell.close(0)

    def _deliver_deferred(self) -> None:
        """On the loop: send every finished deferred reply."""
        while self._bell is not None:
            try:
                self._bell.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        while True:
            try:
                done = self._done.get_nowait()
            except queue.Empty:
                return
            reply = done.reply
            if done.failure is not None:
                self._refused("internal_error", done.failure)
            elif done.then is not None:
                try:
                    done.then(reply)
                except Exception:
                    logger.exception("{}: after a deferred request", self.service)
            try:
                data = encode(reply, done.req.id)
            except Exception as exc:  # a job returning an unsendable message is a bug
                logger.exception("{}: cannot encode a deferred reply", self.service)
                data = encode(ErrorReply(code="internal_error", message=repr(exc)[:1000]),
                              done.req.id)
            self.workers[done.req.worker].reply(Request(client=done.req.client, body=[]), data)

    # Hooks ----------------------------------------------------------------------------------

    def on_start(self) -> None:
        """Called once before serving."""

    def on_stop(self) -> None:
        """Called once after the loop ends."""

    def end_turn(self) -> None:
        """Called at the end of each turn of the loop, before the turn's replies are sent."""

    def on_ping(self, _msg: Ping, _req: Incoming) -> Message:
        return Pong(service=self.service, pid=os.getpid(), started_at=self.started_at)

    # Serving --------------------------------------------------------------------------------

    def serve(self, request: Request) -> bytes:
        """The encoded reply to one request; never raises."""
        return answer(request, lambda envelope: self._dispatch(envelope, request.client),
                      self.settings.max_message_bytes, self._refused)

    def _dispatch(self, envelope: Envelope[Message], client: bytes) -> Message:
        req = Incoming(envelope.id, client, identity_of(client), self._serving)
        if req.identity is not None:
            refusal = self.authorize(envelope.body, req)
            if refusal is not None:
                return refusal
        handler = self._handlers.get(type(envelope.body))
        if handler is None:
            return ErrorReply(code="unsupported_type",
                              message=f"{self.service} does not handle {envelope.type!r}")
        reply = handler(envelope.body, req)
        self._held = isinstance(reply, Deferred)
        return reply

    def authorize(self, msg: Message, req: Incoming) -> Message | None:
        """None if the authenticated sender of ``req`` may send ``msg``, else the refusal."""
        identity = req.identity
        if identity is None:
            return None
        if type(msg) not in self.agent_requests:
            return self.refuse_sender(msg, req, "forbidden", (
                f"{self.service} does not take {msg.type_name!r} from agent {identity!r}"))
        machine_of = self.agent_requests[type(msg)]
        claimed = machine_of(msg) if machine_of is not None else identity
        if claimed != identity:
            return self.refuse_sender(msg, req, "wrong_machine", (
                f"agent {identity!r} cannot send {msg.type_name!r} for machine {claimed!r}"))
        return None

    def refuse_sender(self, msg: Message, req: Incoming, code: str, text: str) -> Message:
        """Refuse ``msg`` for who sent it: an event, a (rate-limited) log line, the error."""
        if self._refusal_log.allow(time.monotonic()):
            logger.warning("{}: refused {}: {}", self.service, msg.type_name, text)
        self.publish(events.SENDER_REFUSED, service=self.service, type=msg.type_name,
                     identity=req.identity, code=code, message=text)
        return ErrorReply(code=code, message=text, detail={"identity": req.identity})

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
        deadlines = [*(w.next_deadline() for w in self.workers), now + 0.25]
        if (client_deadline := self.client.next_deadline()) is not None:
            deadlines.append(client_deadline)
        if self._timers:
            deadlines.append(self._timers[0][0])
        return max(0, int((min(deadlines) - now) * 1000) + 1)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        logger.info("{}: serving on {}", self.service, self.settings.tree_mdp_endpoint)
        self.on_start()
        poller, polled = zmq.Poller(), None
        try:
            while not self._stopping:
                sockets = (*(w.socket for w in self.workers), self.client.socket,
                           *self._extra)
                if sockets != polled:
                    poller, polled = zmq.Poller(), sockets
                    for sock in sockets:
                        poller.register(sock, zmq.POLLIN)
                ready = dict(poller.poll(self._timeout_ms(time.monotonic())))
                replies: list[tuple[Worker, Request, bytes]] = []
                # Oldest idle first: the order the broker handed them their requests.
                for index in sorted(range(len(self.workers)),
                                    key=lambda i: self.workers[i].idle_since):
                    worker = self.workers[index]
                    if worker.socket not in ready:
                        continue
                    self._serving = index
                    for request in worker.drain():
                        self._held = False
                        reply = self.serve(request)
                        if not self._held:  # else defer() answers when its job is done
                            replies.append((worker, request, reply))
                self._serving = 0
                if self.client.socket in ready:
                    self.client.drain()
                for sock, on_readable in list(self._extra.items()):
                    if sock in ready:
                        on_readable()
                if not self._done.empty():  # a doorbell lost to a race: deliver anyway
                    self._deliver_deferred()
                now = time.monotonic()
                for worker in self.workers:
                    worker.tick(now)
                self.client.tick(now)
                self._run_timers(now)
                self.end_turn()
                for worker, request, reply in replies:
                    worker.reply(request, reply)
                self.beacon.beat()
        finally:
            self.on_stop()
            self.close()
        logger.info("{}: stopped", self.service)
        return 0

    def close(self) -> None:
        """Release the threads and sockets; :meth:`run` ends with it, and so must anyone who
        calls :meth:`serve` in-process (tests)."""
        if self._pool is not None:  # running jobs end by themselves (their deadline)
            self._pool.shutdown(wait=False, cancel_futures=True)
        for worker in self.workers:
            worker.close()
        self.client.close()
        self.bus.close()
        for sock in self._extra:
            sock.close(0)
        self.ctx.term()

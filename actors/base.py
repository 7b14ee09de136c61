"""What every actor process shares: its MDP worker, an MDP client, the bus, timers, shutdown.

An actor subclass names its ``service`` and registers handlers; its poll loop
(transport/poll_loop.py, the one the agent runs too) receives, and this decodes, calls the
handler and replies. Bad input never escapes a handler: it becomes an
:class:`~messages.ErrorReply` and a ``lea:bad_message`` event.

Who may ask what (docs/architecture.md, "Who may do what"), by the door a request came
through (:attr:`Incoming.identity`, written by the broker):

- the tree's own door (``@tree``: an actor, the console, the supervisor): anything;
- the people's door (``@os:<uid>``, the command line): what the plain endpoint may, and the
  :attr:`Actor.control_requests` if that OS account is the tree's or in ``control_group``
  (actors/callers.py); its ``os_user`` is filled from the proof, ``account``/``role`` refused;
- the plain loopback endpoint (no identity: nothing says who calls): reads and agents'
  messages, never :attr:`Actor.control_requests` nor :attr:`Actor.tree_requests`;
- a peer the broker authenticated with CURVE is an agent, named by its identity; it may send
  only the types in :attr:`Actor.agent_requests`, and only for its own machine.

Anything else is refused (``forbidden``, ``not_in_control_group``, ``forged_claim``,
``wrong_machine``) with a ``lea:sender_refused`` event.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

import zmq
from loguru import logger

from actors import callers
from actors.deferred import Deferred, DeferredPool
from messages import events
from messages.base import Message
from messages.codec import Envelope, encode
from messages.control import ErrorReply, Ping, Pong
from runtime.rate_limit import RateLimit
from runtime.settings import Settings
from transport.bus import Publisher
from transport.client import Callback, Client
from transport.peer_id import TREE_USER_ID, identity_of, is_agent, person_uid
from transport.poll_loop import Pollable, PollLoop, Timers
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

    @property
    def agent(self) -> str | None:
        """The agent (CURVE identity) that sent it, or None: the tree, a person, a peer of
        the plain endpoint."""
        return self.identity if is_agent(self.identity) else None


def caller_of(req: Incoming) -> dict[str, Any]:
    """The OS account of a request from the people's door (``os_user``, ``uid``), else {}."""
    uid = person_uid(req.identity)
    return {} if uid is None else {"os_user": callers.account_name(uid), "uid": uid}


Handler = Callable[[Any, Incoming], Message]
MachineOf = Callable[[Any], str]
"""The machine a message speaks for (its ``machine_id``)."""

__all__ = ["Actor", "Deferred", "Handler", "Incoming", "MachineOf", "caller_of"]


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
    control_requests: ClassVar[frozenset[type[Message]]] = frozenset()
    """Commands that change or delete: from the tree, or a person of the control group."""
    tree_requests: ClassVar[frozenset[type[Message]]] = frozenset()
    """Messages only the tree's own processes may send (records in an actor's name...)."""

    def __init__(self, settings: Settings) -> None:
        if not self.service:
            raise TypeError(f"{type(self).__name__} must set a service name")
        self.settings = settings
        self.started_at = time.time()
        self.ctx: zmq.Context[Any] = zmq.Context()
        # The tree's own door: the only one its services may be served from (tree_door.py).
        # With a broker pair, the other broker's door next (docs/operations.md).
        self.workers = [Worker(self.ctx, settings.tree_mdp_endpoints, self.service,
                               settings.heartbeat_interval_s, settings.heartbeat_liveness)
                        for _ in range(max(1, self.worker_connections))]
        self.worker = self.workers[0]
        self._serving = 0  # index of the worker connection whose request is being served
        self.client = Client(self.ctx, settings.tree_mdp_endpoints)
        for worker in self.workers:
            worker.on_move = self.client.follow
        self.bus = Publisher(self.ctx, settings.bus_in_endpoint, source=self.service)
        self._handlers: dict[type[Message], Handler] = {}
        self._extra: list[zmq.Socket[bytes]] = []
        self._held = False  # the request being served is answered later (defer)
        self._replies: list[tuple[Worker, Request, bytes]] = []  # the turn's, sent at its end
        self._refusal_log = RateLimit(2.0)  # a hostile peer must not flood the log
        self.poll_loop = PollLoop(self.service)
        self.timers = Timers(self.service)
        self.deferred: DeferredPool[Incoming] = DeferredPool(
            self.deferred_workers, self.service, self.poll_loop.wake)
        # A turn: requests (oldest idle connection first), replies to our calls, other
        # sockets, deferred replies, timeouts, timers; then end_turn, then the turn's replies.
        self.poll_loop.watch(lambda: [w.socket for w in self.workers], self._serve_ready)
        self.poll_loop.watch(lambda: (self.client.socket,), lambda _ready: self.client.drain())
        self.poll_loop.each_turn(lambda _now: self._deliver_deferred())
        for worker in self.workers:
            self.poll_loop.add(worker)
        self.poll_loop.add(self.client)
        self.poll_loop.add(self.timers)
        self.poll_loop.each_turn(lambda _now: self._end_turn())
        self.handle(Ping, self.on_ping)

    # Registration -------------------------------------------------------------------------

    def handle(self, kind: type[M], handler: Callable[[M, Incoming], Message]) -> None:
        """Serve requests whose body is a ``kind`` with ``handler``."""
        self._handlers[kind] = cast(Handler, handler)

    def every(self, interval_s: float, callback: Callable[[float], None]) -> None:
        """Call ``callback(now)`` every ``interval_s`` seconds from the loop."""
        self.timers.every(interval_s, callback)

    def watch(self, sock: zmq.Socket[bytes], on_readable: Callable[[], None]) -> None:
        """Poll another socket in the loop."""
        self._extra.append(sock)
        self.poll_loop.watch(lambda: (sock,), lambda _ready: on_readable())

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
        return self.deferred.submit(req, work, then)

    def answer_held(self, req: Incoming, reply: Message) -> None:
        """Answer ``req``, whose handler returned :class:`Deferred` to hold it, with the
        replies of this turn (after its end_turn)."""
        self._replies.append((self.workers[req.worker], Request(client=req.client, body=[]),
                              encode(reply, req.id)))

    def _deliver_deferred(self) -> None:
        """On the loop: send every finished deferred reply."""
        for done in self.deferred.finished():
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
        msg = envelope.body
        if is_agent(req.identity):
            refusal = self.authorize(msg, req)
        elif req.identity != TREE_USER_ID:
            msg, refusal = self.admit_local(msg, req)
        else:
            refusal = None
        if refusal is not None:
            return refusal
        handler = self._handlers.get(type(msg))
        if handler is None:
            return ErrorReply(code="unsupported_type",
                              message=f"{self.service} does not handle {envelope.type!r}")
        reply = handler(msg, req)
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

    def admit_local(self, msg: Message, req: Incoming) -> tuple[Message, Message | None]:
        """A request of the plain endpoint or the people's door: (the message to serve, with
        ``os_user`` filled from the proof; the refusal, or None)."""
        kind = type(msg)
        if kind in self.tree_requests:
            return msg, self.refuse_sender(msg, req, "forbidden", (
                f"{self.service} takes {msg.type_name!r} from the tree's own processes only"))
        if kind not in self.control_requests:
            return msg, None
        uid = person_uid(req.identity)
        if uid is None:
            return msg, self.refuse_sender(msg, req, "forbidden", (
                f"{msg.type_name!r} changes replays or the audit trail: it is taken from the "
                "people's door only (LEA_CONTROL_ENDPOINT, which the command line uses), "
                "where the server knows the caller's OS account"))
        name = callers.account_name(uid)
        why = callers.control_refusal(uid, name, os.getuid(), self.settings.control_group,
                                      callers.group_names(uid))
        if why is not None:
            return msg, self.refuse_sender(msg, req, "not_in_control_group", why)
        why = callers.claim_problem(msg.model_dump(), name)
        if why is not None:
            return msg, self.refuse_sender(msg, req, "forged_claim", why)
        if "os_user" in kind.model_fields:
            msg = msg.model_copy(update={"os_user": name})
        return msg, None

    def refuse_sender(self, msg: Message, req: Incoming, code: str, text: str) -> Message:
        """Refuse ``msg`` for who sent it: an event, a (rate-limited) log line, the error."""
        if self._refusal_log.allow(time.monotonic()):
            logger.warning("{}: refused {}: {}", self.service, msg.type_name, text)
        self.publish(events.SENDER_REFUSED, service=self.service, type=msg.type_name,
                     identity=req.identity, code=code, message=text, **caller_of(req))
        return ErrorReply(code=code, message=text,
                          detail={"identity": req.identity, **caller_of(req)})

    def _refused(self, reason: str, detail: str) -> None:
        self.publish(events.BAD_MESSAGE, service=self.service, reason=reason,
                     detail=detail[:500])

    def stop(self) -> None:
        self.poll_loop.stop()

    def _serve_ready(self, ready: Collection[Pollable]) -> None:
        """Serve the requests of the readable worker connections, oldest idle first: the
        order the broker handed them their requests. Their replies wait for the turn's end."""
        for index in sorted(range(len(self.workers)), key=lambda i: self.workers[i].idle_since):
            worker = self.workers[index]
            if worker.socket not in ready:
                continue
            self._serving = index
            for request in worker.drain():
                self._held = False
                reply = self.serve(request)
                if not self._held:  # else defer() answers when its job is done
                    self._replies.append((worker, request, reply))
        self._serving = 0

    def _end_turn(self) -> None:
        self.end_turn()
        replies, self._replies = self._replies, []
        for worker, request, reply in replies:
            worker.reply(request, reply)

    def run(self) -> int:
        logger.info("{}: serving on {}", self.service, self.settings.tree_mdp_endpoint)
        self.on_start()
        try:
            with self.poll_loop.signals():
                self.poll_loop.run()
        finally:
            self.on_stop()
            self.close()
        logger.info("{}: stopped", self.service)
        return 0

    def close(self) -> None:
        """Release the threads and sockets; :meth:`run` ends with it, and so must anyone who
        calls :meth:`serve` in-process (tests)."""
        self.deferred.close()
        for worker in self.workers:
            worker.close()
        self.client.close()
        self.bus.close()
        for sock in self._extra:
            sock.close(0)
        self.ctx.term()

"""The worker side of MDP/0.2: a DEALER that registers a service, heartbeats and reconnects.

Non-blocking and poll-driven, like the Guide's mdwrkapi but without owning the loop: the
owner polls :attr:`Worker.socket`, calls :meth:`Worker.drain` when it is readable and
:meth:`Worker.tick` at least every heartbeat interval.

A broker that answers our READY with DISCONNECT at once (it refuses the service, e.g. an
agent whose CURVE key is not that machine's) would make an immediate re-register a busy
loop of handshakes: each such refusal in a row doubles the wait before the next READY, up to
:data:`REFUSED_BACKOFF_MAX_S`, and is logged.

Given the endpoints of a broker pair (docs/operations.md, "A broker pair"), every reconnect
(the broker silent past liveness, its DISCONNECT, a refusal) goes to the next one: a passive
broker turns a worker away with DISCONNECT, a dead one is silent, so the worker ends up at
the broker that serves. With one endpoint it reconnects to that one, as RFC 18 says.

A passive broker's DISCONNECT says so (``mdp.PASSIVE``): it is no refusal and never backs
off. The worker goes to the other broker at once; once it has found every broker of its list
passive it sends its READY again every heartbeat interval, a fixed pace. A passive broker
holds that READY while its peer is silent, and registers it when it takes over: so the
actors of a server whose broker is passive (each server's tree reaches only its own broker)
serve as soon as it takes over, instead of after a back-off grown while it was passive.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import zmq
from loguru import logger
from zmq.backend import Socket as _Raw

from messages.base import Message
from messages.codec import Envelope, MessageError, decode, encode
from messages.control import ErrorReply
from transport import mdp
from transport.frames import recv_frames

SocketSetup = Callable[["zmq.Socket[bytes]"], None]

REFUSED_WITHIN_S = 1.0
"""A DISCONNECT this soon after our READY, with no request in between, is a refusal."""
REFUSED_BACKOFF_S = 0.1
REFUSED_BACKOFF_MAX_S = 10.0

_send = _Raw.send  # pyzmq's Cython send, under the Python-level Socket.send (transport/frames.py)
_SNDMORE = int(zmq.SNDMORE)  # a plain int: an enum member is converted on every call


def _send_blocking(sock: zmq.Socket[bytes], frames: list[bytes]) -> None:
    """``sock.send_multipart(frames)`` (blocking while the queue is full), 1-2 us cheaper."""
    last = len(frames) - 1
    for i in range(last):
        _send(sock, frames[i], _SNDMORE)
    _send(sock, frames[last], 0)


@dataclass(frozen=True, slots=True)
class Request:
    """A request the broker handed us: reply to ``client`` with the same address."""

    client: bytes
    body: list[bytes]


class Worker:
    """One MDP worker connection for ``service``."""

    def __init__(
        self,
        ctx: zmq.Context[Any],
        endpoint: str | Sequence[str],
        service: str,
        heartbeat_interval_s: float = 1.0,
        liveness: int = 3,
        setup: SocketSetup | None = None,
    ) -> None:
        self.ctx = ctx
        self.endpoints = (endpoint,) if isinstance(endpoint, str) else tuple(endpoint)
        self.endpoint = self.endpoints[0]  # the broker this connection goes to
        self.service = service.encode()
        self.heartbeat_interval_s = heartbeat_interval_s
        self.liveness = liveness
        self.setup = setup
        self.refusals = 0  # READYs answered by DISCONNECT at once, in a row
        self.passive = 0  # DISCONNECTs from passive brokers in a row (module docstring)
        # Told the endpoint each time this worker moves to another broker of a pair: the
        # process's client follows it there (Client.follow) instead of waiting for timeouts.
        self.on_move: Callable[[str], None] | None = None
        self._ready_at: float | None = None  # a READY waits for this time (after refusals)
        self.socket: zmq.Socket[bytes] = self._connect()
        self.connections = 1

    def _connect(self, delay_s: float = 0.0) -> zmq.Socket[bytes]:
        sock: zmq.Socket[bytes] = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        if self.setup is not None:
            self.setup(sock)
        sock.connect(self.endpoint)
        now = time.monotonic()
        if delay_s > 0:
            self._ready_at = now + delay_s  # tick() sends it; nothing else goes before it
        else:
            self._ready_at = None
            sock.send_multipart(mdp.worker_ready(self.service))
        self.ready_sent_at = self.heard_at = self.sent_at = now + delay_s
        # When this connection last went back to the broker's waiting list (READY or a
        # FINAL): the broker hands the next request to the one waiting longest (RFC 18 leaves
        # it open; broker/majordomo.py does LRU), so a process serving several connections
        # reads them in this order to take requests in the order they were sent.
        self.idle_since = self.ready_sent_at
        self.requested = False
        return sock

    def reconnect(self, reason: str, delay_s: float = 0.0) -> None:
        """Close the socket and register again on a new one (RFC 18: after DISCONNECT),
        after ``delay_s``."""
        if len(self.endpoints) > 1:  # the other broker of the pair (module docstring)
            at = self.endpoints.index(self.endpoint)
            self.endpoint = self.endpoints[(at + 1) % len(self.endpoints)]
            if self.on_move is not None:
                self.on_move(self.endpoint)
        if not delay_s:
            logger.info("worker {}: reconnecting to {} ({})", self.service.decode(),
                        self.endpoint, reason)
        self.socket.close(0)
        self.socket = self._connect(delay_s)
        self.connections += 1

    def _disconnected(self, passive: bool) -> None:
        """The broker sent DISCONNECT: register again, at once unless it looks refused or
        every broker was found passive (then in a heartbeat interval)."""
        now = time.monotonic()
        if passive:
            self.refusals = 0
            self.passive = 1 if self.requested else self.passive + 1
            if self.passive < len(self.endpoints):
                self.reconnect("the broker is passive")
                return
            if self.passive == len(self.endpoints):
                logger.info("worker {}: no broker serves (passive); READY again every {:g} s",
                            self.service.decode(), self.heartbeat_interval_s)
            self.reconnect("the broker is passive", self.heartbeat_interval_s)
            return
        if self.requested or self._ready_at is not None or (
                now - self.ready_sent_at > REFUSED_WITHIN_S):
            self.refusals = 0
            self.reconnect("broker sent DISCONNECT")
            return
        self.refusals += 1
        delay = min(REFUSED_BACKOFF_S * 2 ** (self.refusals - 1), REFUSED_BACKOFF_MAX_S)
        logger.warning("worker {}: the broker refused our READY ({} time(s) in a row); trying"
                       " again in {:g} s (with CURVE, an agent may serve only agent.<the name"
                       " of its key>)", self.service.decode(), self.refusals, delay)
        self.reconnect("broker refused READY", delay)

    def drain(self) -> list[Request]:
        """Every command waiting on the socket; returns the requests among them."""
        requests: list[Request] = []
        while True:
            try:
                frames = recv_frames(self.socket)  # recv_multipart(NOBLOCK), cheaper
            except zmq.Again:
                return requests
            self.heard_at = time.monotonic()
            if len(frames) < 2 or frames[0] != mdp.WORKER:
                logger.warning("worker {}: dropped invalid frames from broker",
                               self.service.decode())
                continue
            command = frames[1]
            if command == mdp.W_REQUEST and len(frames) >= 5 and frames[3] == b"":
                self.requested = True
                requests.append(Request(client=frames[2], body=frames[4:]))
            elif command == mdp.W_DISCONNECT:
                self._disconnected(frames[2:] == [mdp.PASSIVE])
                return requests
            elif command == mdp.W_HEARTBEAT:
                self.passive = 0  # registered: a broker serves us
            else:
                logger.warning("worker {}: unexpected command {!r}", self.service.decode(),
                               command)

    def reply(self, request: Request, *body: bytes, final: bool = True) -> None:
        """Send PARTIAL (``final=False``) or FINAL for ``request``."""
        _send_blocking(self.socket, mdp.worker_reply(request.client, *body, final=final))
        self.sent_at = time.monotonic()
        if final:
            self.idle_since = self.sent_at

    def tick(self, now: float | None = None) -> None:
        """Heartbeat when due; reconnect when the broker has been silent past liveness."""
        now = time.monotonic() if now is None else now
        if self._ready_at is not None:
            if now < self._ready_at:
                return
            self._ready_at = None
            with contextlib.suppress(zmq.Again):
                self.socket.send_multipart(mdp.worker_ready(self.service), zmq.NOBLOCK)
            self.ready_sent_at = self.heard_at = self.sent_at = self.idle_since = now
            return
        if now - self.heard_at > self.heartbeat_interval_s * self.liveness:
            if self.socket.poll(0, zmq.POLLIN):
                # What the broker sent is waiting: the silence was ours (this process was
                # stopped or starved, not the broker). Reconnecting would drop requests the
                # broker already handed us; the next drain reads them and hears the broker.
                return
            self.reconnect("broker silent past liveness")
            return
        if now - self.sent_at >= self.heartbeat_interval_s:
            # Never block: a socket whose CURVE handshake was refused has no pipe left, and a
            # blocking send on it would hang the owner's loop (agent/link/curve_link.py).
            with contextlib.suppress(zmq.Again):
                self.socket.send_multipart(mdp.heartbeat(), zmq.NOBLOCK)
            self.sent_at = now

    def next_deadline(self) -> float:
        """When :meth:`tick` must next be called (monotonic seconds)."""
        if self._ready_at is not None:
            return self._ready_at
        return min(self.sent_at + self.heartbeat_interval_s,
                   self.heard_at + self.heartbeat_interval_s * self.liveness)

    def close(self) -> None:
        """Tell the broker we leave, then close."""
        with contextlib.suppress(zmq.ZMQError):
            self.socket.send_multipart(mdp.disconnect(), zmq.NOBLOCK)
        self.socket.close(linger=100)


def answer(request: Request, handler: Callable[[Envelope[Message]], Message], limit: int,
           on_refused: Callable[[str, str], None]) -> bytes:
    """The encoded reply to one request: the handler's answer, or an ErrorReply; never raises.

    ``on_refused(reason, detail)`` is told of every refusal (to publish or log it): a body that
    is not exactly one valid message is ``bad_message``; a handler that raises is
    ``internal_error``, and the worker goes on.
    """
    msg_id: str | None = None
    try:
        if len(request.body) != 1:
            raise MessageError("not_envelope", f"expected 1 body frame, got {len(request.body)}")
        envelope = decode(request.body[0], limit=limit)
        msg_id = envelope.id
        return encode(handler(envelope), msg_id)
    except MessageError as exc:
        on_refused(exc.code, exc.detail)
        return encode(ErrorReply(code="bad_message", message=str(exc)[:1000],
                                 detail={"reason": exc.code}), exc.msg_id)
    except Exception as exc:  # a handler bug must not take the process down
        logger.exception("serving a request failed")
        on_refused("internal_error", repr(exc))
        return encode(ErrorReply(code="internal_error", message=repr(exc)[:1000]), msg_id)

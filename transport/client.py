"""The client side of MDP/0.2, with several requests outstanding matched by message id.

:class:`Client` is poll-driven for actors (callbacks, per-request timeout and retries);
:class:`SyncClient` is the blocking Lazy Pirate for commands and tests: wait for the reply,
and on timeout close the socket, open a new one and send again.

Given the endpoints of a broker pair (docs/operations.md, "A broker pair"), both go to the
next broker where they would retry (the Binary Star client): :class:`SyncClient` on every
timeout; :class:`Client` when a request times out with nothing heard on the socket since it
was sent (a broker that answers others is not dead: a slow service is not a failover), once
per socket, or at once when the process's worker moved there (:meth:`Client.follow`: a
worker hears a dead broker within its heartbeat liveness, sooner than a request times out).
With one endpoint nothing changes.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq

from messages.base import Message
from messages.codec import Envelope, MessageError, decode, encode, new_id
from messages.control import ErrorReply
from transport import mdp
from transport.frames import recv_frames, send_frames
from transport.worker import SocketSetup


class CallFailed(RuntimeError):
    """No reply after every retry, or a reply that is not a valid message."""

    def __init__(self, code: str, message: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.detail = detail or {}


Callback = Callable[[Envelope[Message] | None, CallFailed | None], None]


@dataclass(slots=True)
class _Pending:
    service: bytes
    payload: bytes
    timeout_s: float
    retries_left: int
    callback: Callback
    deadline: float = field(default=0.0)
    sent_at: float = field(default=0.0)
    socket: int = field(default=0)  # which of the client's sockets it was last sent on


def _new_socket(ctx: zmq.Context[Any], endpoint: str, setup: SocketSetup | None) -> Any:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
    if setup is not None:
        setup(sock)
    sock.connect(endpoint)
    return sock


def _reply_envelope(frames: list[bytes]) -> tuple[bool, Envelope[Message] | None, str]:
    """(is_final, envelope or None, error text) of a broker → client command."""
    if len(frames) < 4 or frames[0] != mdp.CLIENT or frames[1] not in (mdp.C_PARTIAL,
                                                                         mdp.C_FINAL):
        return False, None, "not an MDP/0.2 client reply"
    try:
        return frames[1] == mdp.C_FINAL, decode(frames[3]), ""
    except MessageError as exc:
        return frames[1] == mdp.C_FINAL, None, str(exc)


def _endpoints(endpoint: str | Sequence[str]) -> tuple[str, ...]:
    return (endpoint,) if isinstance(endpoint, str) else tuple(endpoint)


class Client:
    """Many requests in flight at once; each reply matched to its request by envelope id."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str | Sequence[str],
                 setup: SocketSetup | None = None) -> None:
        self.endpoints = _endpoints(endpoint)
        self.endpoint = self.endpoints[0]  # the broker the socket goes to
        self.socket: zmq.Socket[bytes] = _new_socket(ctx, self.endpoint, setup)
        self._new: Callable[[], zmq.Socket[bytes]] = lambda: _new_socket(
            ctx, self.endpoint, setup)
        self._pending: dict[str, _Pending] = {}
        self._deadlines: list[tuple[float, str]] = []
        self._sockets = 0  # sockets opened before this one
        self._heard_at = float("-inf")  # when this socket last received a reply

    def call(self, service: str, message: Message, callback: Callback,
             timeout_s: float = 2.5, retries: int = 2, msg_id: str | None = None) -> str:
        """Send ``message`` to ``service``; ``callback(reply, None)`` or ``(None, error)`` later.

        A retry re-sends the same bytes with the same id, so receivers can deduplicate.
        """
        msg_id = msg_id or new_id()
        return self.call_encoded(service, encode(message, msg_id), msg_id, callback,
                                 timeout_s, retries)

    def call_encoded(self, service: str, payload: bytes, msg_id: str, callback: Callback,
                     timeout_s: float = 2.5, retries: int = 2) -> str:
        """As :meth:`call`, with the message already encoded in ``payload``, whose envelope
        id is ``msg_id`` (the reply is matched by it)."""
        pending = _Pending(service.encode(), payload, timeout_s, retries, callback)
        self._pending[msg_id] = pending
        self._send(msg_id, pending, time.monotonic())
        return msg_id

    def _send(self, msg_id: str, pending: _Pending, now: float) -> None:
        pending.deadline = now + pending.timeout_s
        pending.sent_at, pending.socket = now, self._sockets
        heapq.heappush(self._deadlines, (pending.deadline, msg_id))
        try:
            # send_frames: send_multipart(NOBLOCK) without pyzmq's per-frame Python layers.
            send_frames(self.socket, mdp.client_request(pending.service, pending.payload))
        except zmq.Again:
            pass  # the timeout path retries it

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    def drain(self) -> None:
        """Read every waiting reply and run the callbacks of the requests they finish."""
        while True:
            try:
                frames = recv_frames(self.socket)  # recv_multipart(NOBLOCK), cheaper
            except zmq.Again:
                return
            final, envelope, _error = _reply_envelope(frames)
            if envelope is None or not final:
                continue  # partials and garbage are not the answer; the timeout covers loss
            self._heard_at = time.monotonic() if len(self.endpoints) > 1 else 0.0
            pending = self._pending.pop(envelope.id, None)
            if pending is not None:
                pending.callback(envelope, None)

    def tick(self, now: float | None = None) -> None:
        """Retry or fail the requests whose timeout has passed."""
        now = time.monotonic() if now is None else now
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, msg_id = heapq.heappop(self._deadlines)
            pending = self._pending.get(msg_id)
            if pending is None or pending.deadline != deadline:
                continue
            if (len(self.endpoints) > 1 and pending.socket == self._sockets
                    and self._heard_at < pending.sent_at):
                self._switch()  # silent since it was sent: the other broker (module doc)
            if pending.retries_left > 0:
                pending.retries_left -= 1
                self._send(msg_id, pending, now)
            else:
                del self._pending[msg_id]
                pending.callback(None, CallFailed(
                    "timeout", f"no reply from {pending.service.decode()} in time"))

    def next_deadline(self) -> float | None:
        while self._deadlines and self._deadlines[0][1] not in self._pending:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def reconnect(self) -> None:
        """Go on with a new socket (libzmq never retries a refused CURVE handshake); the
        requests outstanding are sent on it when their timeouts come."""
        self.socket.close(0)
        self.socket = self._new()
        self._sockets += 1
        self._heard_at = float("-inf")

    def follow(self, endpoint: str) -> None:
        """Go on with a socket to ``endpoint``, another broker of the pair (where this
        process's worker just moved), and send the outstanding requests there now."""
        if endpoint == self.endpoint or endpoint not in self.endpoints:
            return
        self.endpoint = endpoint
        self.reconnect()
        now = time.monotonic()
        for msg_id, pending in list(self._pending.items()):
            self._send(msg_id, pending, now)  # the same id: receivers deduplicate

    def _switch(self) -> None:
        """Go on with a socket to the next broker of the pair."""
        at = self.endpoints.index(self.endpoint)
        self.endpoint = self.endpoints[(at + 1) % len(self.endpoints)]
        self.reconnect()

    def close(self) -> None:
        self.socket.close(0)


class SyncClient:
    """Blocking request/reply with the Lazy Pirate retry, for command-line tools and tests."""

    def __init__(self, endpoint: str | Sequence[str], ctx: zmq.Context[Any] | None = None,
                 setup: SocketSetup | None = None) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.endpoints = _endpoints(endpoint)
        self.endpoint = self.endpoints[0]
        self.setup = setup
        self.socket: zmq.Socket[bytes] = _new_socket(self.ctx, self.endpoint, setup)

    def _reset(self) -> None:
        self.socket.close(0)
        if len(self.endpoints) > 1:  # the Lazy Pirate retry goes to the other broker
            at = self.endpoints.index(self.endpoint)
            self.endpoint = self.endpoints[(at + 1) % len(self.endpoints)]
        self.socket = _new_socket(self.ctx, self.endpoint, self.setup)

    def raw(self, service: str, *body: bytes, timeout_s: float = 2.5,
            retries: int = 2) -> list[bytes]:
        """The body frames of the FINAL reply to a raw request (for ``mmi.*``)."""
        for _attempt in range(retries + 1):
            self.socket.send_multipart(mdp.client_request(service.encode(), *body))
            if self.socket.poll(int(timeout_s * 1000)):
                frames = self.socket.recv_multipart()
                if len(frames) >= 3 and frames[0] == mdp.CLIENT and frames[1] == mdp.C_FINAL:
                    return frames[3:]
            self._reset()
        raise CallFailed("timeout", f"no reply from {service} after {retries + 1} tries")

    def call(self, service: str, message: Message, timeout_s: float = 2.5,
             retries: int = 2) -> Envelope[Message]:
        """The reply to ``message``; raises CallFailed on timeout or an ErrorReply answer."""
        msg_id = new_id()
        payload = encode(message, msg_id)
        deadline_each = timeout_s
        for _attempt in range(retries + 1):
            self.socket.send_multipart(mdp.client_request(service.encode(), payload))
            end = time.monotonic() + deadline_each
            while (remaining := end - time.monotonic()) > 0:
                if not self.socket.poll(int(remaining * 1000) + 1):
                    break
                final, envelope, _error = _reply_envelope(self.socket.recv_multipart())
                if envelope is None or envelope.id != msg_id or not final:
                    continue  # a late reply to an earlier call, or a partial
                if isinstance(envelope.body, ErrorReply):
                    body = envelope.body
                    raise CallFailed(body.code, body.message, body.detail)
                return envelope
            self._reset()
        raise CallFailed("timeout", f"no reply from {service} after {retries + 1} tries")

    def close(self) -> None:
        self.socket.close(0)

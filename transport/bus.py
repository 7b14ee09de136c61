"""The event bus: publishers connect to the broker's XSUB, watchers a SUB to its XPUB.

The broker forwards every subscription to the publishers, which filter (as PUB/SUB does):
an event that no watcher subscribed to never leaves its process. A publisher also reads
those subscriptions (:class:`Subscriptions`), so that such an event is not even built.
"""

from __future__ import annotations

import time
from typing import Any

import zmq

from messages.codec import MessageError, decode, encode
from messages.events import Event
from transport.frames import poll_items, recv_frames, zmq_poll


def event_frames(topic: str, source: str, data: dict[str, Any] | None = None) -> list[bytes]:
    """The two frames of a bus event: the topic, then the encoded :class:`Event`."""
    event = Event(topic=topic, source=source, at=time.time(), data=data or {})
    return [topic.encode(), encode(event)]


def parse_event(frames: list[bytes]) -> Event:
    """The :class:`Event` in ``frames``; raises MessageError if they are not one."""
    if len(frames) != 2:
        raise MessageError("not_envelope", f"a bus event has 2 frames, got {len(frames)}")
    body = decode(frames[1]).body
    if not isinstance(body, Event):
        raise MessageError("invalid_body", f"expected an event, got {body.type_name}")
    return body


#: (Un)subscriptions read per look at a publisher's socket: a flood waits for later events.
SUBSCRIPTIONS_BATCH = 1000
#: Past this many prefixes every topic counts as wanted (the socket's own filter still
#: applies): a peer flooding the bus with subscriptions must not make each publish slow.
MAX_PREFIXES = 64


class Subscriptions:
    """The topic prefixes subscribed downstream, from what an XPUB socket receives.

    libzmq's XPUB (not verbose) hands up ``\x01prefix`` when a prefix gets its first
    subscriber and ``\x00prefix`` when its last one leaves (unsubscribes or disconnects), so
    a set of prefixes mirrors its own filter. Anything else (a message a peer sent upstream)
    is ignored. ``sticky``: unsubscriptions are ignored too (see BusProxy for why).
    """

    def __init__(self, sticky: bool = False) -> None:
        self.prefixes: set[bytes] = set()
        self.sticky = sticky
        self._any: tuple[bytes, ...] = ()  # what wants() matches, for bytes.startswith

    def update(self, frames: list[bytes]) -> None:
        if len(frames) != 1 or not frames[0]:
            return
        kind, prefix = frames[0][0], frames[0][1:]
        if kind == 1:
            self.prefixes.add(prefix)
        elif kind == 0 and not self.sticky:
            self.prefixes.discard(prefix)
        else:
            return
        prefixes = self.prefixes
        self._any = tuple(prefixes) if len(prefixes) <= MAX_PREFIXES else (b"",)

    def wants(self, topic: bytes) -> bool:
        """True if a subscriber may receive ``topic`` (an empty prefix matches all)."""
        return topic.startswith(self._any)


class Publisher:
    """Publishes events to the bus. Best effort: the bus is for watching, never for state.

    An XPUB, not a PUB: it filters alike, and it also tells us what is subscribed, so that
    an event nobody watches costs a readiness check instead of being built and encoded.
    """

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, source: str) -> None:
        self.source = source
        self.socket: zmq.Socket[bytes] = ctx.socket(zmq.XPUB)
        self.socket.setsockopt(zmq.SNDHWM, 100_000)
        self.socket.setsockopt(zmq.LINGER, 200)
        self.socket.connect(endpoint)
        self.subscriptions = Subscriptions()
        self._waiting = poll_items(self.socket)

    def publish(self, topic: str, **data: Any) -> None:
        sock, subscriptions = self.socket, self.subscriptions
        for _ in range(SUBSCRIPTIONS_BATCH):
            if not zmq_poll(self._waiting, 0):
                if not subscriptions.wants(topic.encode()):
                    return  # the socket would drop it: no subscriber of this topic
                break
            subscriptions.update(recv_frames(sock))
        # else: more wait, so the set may lag the socket's filter; send, and let it filter.
        try:
            sock.send_multipart(event_frames(topic, self.source, data), zmq.NOBLOCK)
        except zmq.Again:
            pass  # a full queue drops the event, as PUB/SUB would anyway

    def close(self) -> None:
        self.socket.close()


class Subscriber:
    """Receives bus events whose topic starts with ``prefix``."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, prefix: str = "lea:") -> None:
        self.socket: zmq.Socket[bytes] = ctx.socket(zmq.SUB)
        self.socket.setsockopt(zmq.RCVHWM, 100_000)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SUBSCRIBE, prefix.encode())
        self.socket.connect(endpoint)

    def recv(self, timeout_s: float | None = None) -> Event | None:
        """The next event, or None after ``timeout_s``; malformed events are skipped."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if remaining is not None and not self.socket.poll(int(remaining * 1000)):
                return None
            frames = self.socket.recv_multipart()
            try:
                return parse_event(frames)
            except MessageError:
                continue

    def close(self) -> None:
        self.socket.close()

"""The event bus: publishers connect a PUB to the broker's XSUB, watchers a SUB to its XPUB."""

from __future__ import annotations

import time
from typing import Any

import zmq

from messages.codec import MessageError, decode, encode
from messages.events import Event


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


class Publisher:
    """Publishes events to the bus. Best effort: the bus is for watching, never for state."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, source: str) -> None:
        self.source = source
        self.socket: zmq.Socket[bytes] = ctx.socket(zmq.PUB)
        self.socket.setsockopt(zmq.SNDHWM, 100_000)
        self.socket.setsockopt(zmq.LINGER, 200)
        self.socket.connect(endpoint)

    def publish(self, topic: str, **data: Any) -> None:
        try:
            self.socket.send_multipart(event_frames(topic, self.source, data), zmq.NOBLOCK)
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

"""The event bus inside the broker: an XSUB/XPUB proxy driven by hand from the broker's loop.

Messages flow XSUB → XPUB, subscriptions XPUB → XSUB. The broker's own events (peer
connected, bad message...) go straight out of the XPUB, rate-limited so that a flood of bad
input cannot turn the broker into an event publisher.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import zmq
from loguru import logger

from runtime.rate_limit import RateLimit
from transport.bus import Subscriptions, event_frames
from transport.frames import PollItems, poll_items, recv_frames, send_frames, zmq_poll

#: Messages moved per wake-up before the loop looks at its other sockets again.
BATCH = 1000
#: The default HWM (1000) drops a fast publisher's events (docs/protocol.md).
BUS_HWM = 100_000

#: First byte of a (un)subscription as an XPUB hands it up.
SUBSCRIPTION_KINDS = (b"\x00", b"\x01")

EventData = dict[str, Any] | Callable[[], dict[str, Any]]


class BusProxy:
    """The XSUB (bus in) and XPUB (bus out) sockets, and the broker's own publishing."""

    def __init__(self, ctx: zmq.Context[Any], max_message_bytes: int) -> None:
        self.xsub: zmq.Socket[bytes] = ctx.socket(zmq.XSUB)
        self.xpub: zmq.Socket[bytes] = ctx.socket(zmq.XPUB)
        for sock in (self.xsub, self.xpub):
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, BUS_HWM)
            sock.setsockopt(zmq.RCVHWM, BUS_HWM)
            # Bus peers are untrusted too: bound what one frame may cost us.
            sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        self.forwarded = 0
        self.published = 0
        # What the watchers want (publish skips the rest). Sticky: our XPUB also hands up
        # "\x00prefix" when a raw peer unsubscribes what it never subscribed, so a watcher may
        # still hold a prefix we are told is gone; a bad peer must not hide our events.
        self.subscriptions = Subscriptions(sticky=True)
        # Set when we sent on a bus socket: that can consume the signal of its ZMQ_FD, so the
        # loop must look at both sockets again rather than wait for the fd.
        self.touched = False
        self._xsub_waiting = poll_items(self.xsub)
        self._xpub_waiting = poll_items(self.xpub)

    def forward_messages(self) -> bool:
        """Move up to BATCH published messages from XSUB to XPUB; True if more may wait."""
        return self._move(self.xsub, self._xsub_waiting, self.xpub, count=True)

    def forward_subscriptions(self) -> bool:
        """Move (un)subscriptions from XPUB back to XSUB, so publishers filter upstream."""
        return self._move(self.xpub, self._xpub_waiting, self.xsub, count=False)

    def _move(self, src: zmq.Socket[bytes], waiting: PollItems, dst: zmq.Socket[bytes],
              count: bool) -> bool:
        for _ in range(BATCH):
            if not zmq_poll(waiting, 0):
                return False
            frames = recv_frames(src)
            self.touched = True
            if not count:
                if len(frames) != 1 or frames[0][:1] not in SUBSCRIPTION_KINDS:
                    continue  # a message sent upstream: no publisher wants one (they queue)
                self.subscriptions.update(frames)
            try:
                send_frames(dst, frames)
            except zmq.ZMQError:
                continue  # PUB/SUB semantics: a full subscriber loses the message
            if count:
                self.forwarded += 1
        return True

    def publish(self, topic: str, data: EventData, limit: RateLimit | None = None,
                now: float = 0.0) -> None:
        """Publish one broker event. With ``limit``, excess events are only counted (and
        ``data`` may be a function, so a suppressed event costs nothing to describe); the next
        event sent carries that count as ``suppressed``. An event no watcher subscribed to
        is dropped first, as the XPUB would, without building it."""
        # The watchers' latest word first (cheap); if more wait, our set may lag: send.
        if not self.forward_subscriptions() and not self.subscriptions.wants(topic.encode()):
            return
        if limit is not None and not limit.allow(now or time.monotonic()):
            return
        if callable(data):
            data = data()
        if limit is not None and limit.dropped:
            data["suppressed"] = limit.dropped
            limit.dropped = 0
        try:
            self.touched = True
            send_frames(self.xpub, event_frames(topic, "broker", data))
            self.published += 1
        except zmq.ZMQError:
            pass
        except Exception:  # an unencodable value must not stop the broker
            logger.exception("could not publish {}", topic)

    def close(self) -> None:
        self.xsub.close(0)
        self.xpub.close(0)

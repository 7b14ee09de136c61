"""The agent's retrying outbox: requests sent again on a backoff until they are answered.

In MDP a worker's FINAL is fire-and-forget: nothing tells the worker it arrived, and a
broker restarted meanwhile drops it. So the outcome of an action does not travel as the
reply to the dispatch (that reply is only :class:`~messages.dispatch.ActionReceived`); it is a
request of its own to the ``dispatcher`` service, answered by
:class:`~messages.dispatch.ReportAck` once recorded, and sent again after 1, 3, 7, then every
7 seconds until then (docs/architecture.md). The same outbox carries claims, progress and hello
(agent/protocol/asks.py). A request is encoded once, by whoever puts it here: every try sends the
same bytes with the same envelope id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from messages.base import Message
from messages.codec import Envelope
from transport.client import CallFailed, Client

BACKOFF_S: tuple[float, ...] = (1.0, 3.0, 7.0)
"""Wait before each re-send; the last one repeats for ever."""


def backoff(sent: int) -> float:
    """How long to wait for an answer to the ``sent``-th send (0-based)."""
    return BACKOFF_S[min(sent, len(BACKOFF_S) - 1)]


OnReply = Callable[[Message], bool]
"""Given an answer, True if it settles the request, False to keep re-sending."""


@dataclass(slots=True)
class _Entry:
    service: str
    payload: bytes
    msg_id: str
    on_reply: OnReply
    sent: int = 0
    sent_at: float = 0.0
    due_at: float | None = 0.0  # None while waiting for an answer or its timeout


class Outbox:
    """Requests keyed by name, each re-sent (the same bytes) until settled.

    A new request under a key replaces the old one (whose late answer is then ignored).
    Everything runs on the owner's loop: call :meth:`tick` when :meth:`next_deadline` is due.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._entries: dict[str, _Entry] = {}

    def send(self, key: str, service: str, payload: bytes, msg_id: str,
             on_reply: OnReply, delay_s: float = 0.0) -> None:
        """Send ``payload`` (an encoded request whose envelope id is ``msg_id``) now, or
        after ``delay_s`` (at a :meth:`tick`)."""
        entry = _Entry(service, payload, msg_id, on_reply)
        self._entries[key] = entry
        now = time.monotonic()
        if delay_s > 0:
            entry.due_at = now + delay_s
        else:
            self._fire(key, entry, now)

    def cancel(self, key: str) -> None:
        self._entries.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _fire(self, key: str, entry: _Entry, now: float) -> None:
        timeout = backoff(entry.sent)
        entry.sent += 1
        entry.sent_at = now
        entry.due_at = None
        if entry.sent > 1:
            logger.info("re-sending {} to {} (try {}, next wait {:.0f}s)", key, entry.service,
                        entry.sent, timeout)

        def answered(reply: Envelope[Message] | None, error: CallFailed | None) -> None:
            self._answered(key, entry, reply, error)

        self.client.call_encoded(entry.service, entry.payload, entry.msg_id, answered,
                                 timeout_s=timeout, retries=0)

    def _answered(self, key: str, entry: _Entry, reply: Envelope[Message] | None,
                  error: CallFailed | None) -> None:
        if self._entries.get(key) is not entry:
            return  # replaced or settled meanwhile
        now = time.monotonic()
        if reply is None:
            entry.due_at = now  # the wait is over: send again at the next tick
            return
        try:
            settled = entry.on_reply(reply.body)
        except Exception:  # a bug in a callback must not stop the retrying of others
            logger.exception("handling the answer to {} failed", key)
            settled = False
        if settled:
            if self._entries.get(key) is entry:  # on_reply may have sent anew under key
                del self._entries[key]
        else:
            # Answered, but not as hoped (an error): wait out this try's delay anyway so a
            # refusing dispatcher is not flooded.
            entry.due_at = entry.sent_at + backoff(entry.sent - 1)

    def tick(self, now: float) -> None:
        for key, entry in list(self._entries.items()):
            if entry.due_at is not None and entry.due_at <= now:
                self._fire(key, entry, now)

    def next_deadline(self) -> float | None:
        due = [e.due_at for e in self._entries.values() if e.due_at is not None]
        return min(due) if due else None

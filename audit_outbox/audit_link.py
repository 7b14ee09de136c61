"""The supervisor's audit records on their way to audit_log, without ever blocking its loop.

The supervisor commits each record in its outbox (audit_outbox/store.py), then this
link sends the outbox through the broker with the shared :class:`AuditSender` (one batch in
flight at a time, re-sent after a failure or a restart of either side) over a non-blocking
MDP client. The broker and audit_log are children of the same supervisor: while either is
down, the records wait in the outbox and the supervisor goes on supervising.

Other processes of the tree commit records to the same outbox (the broker its refusals,
broker/refusal_audit.py): the link looks at the outbox every :data:`OUTBOX_LOOK_S` too.

The supervisor's loop sleeps in a selector, not a zmq poller: :meth:`AuditLink.fileno` is
the client socket's ``ZMQ_FD``. That fd is edge-triggered, so :meth:`pump` always ends
with a drain (read until EAGAIN): anything that arrives after it makes the fd readable again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

import zmq
from loguru import logger

from audit_outbox.sender import RETRY_S, AuditSender
from audit_outbox.store import AuditOutbox
from transport.client import Client

OUTBOX_LOOK_S = 1.0
"""How often the link looks for records another process committed to the outbox."""


class AuditLink:
    """Records committed in ``outbox`` and sent to audit_log through the broker at ``endpoint``
    (or either broker of a pair: the client moves to the one that serves)."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str | Sequence[str], outbox: AuditOutbox,
                 source: str) -> None:
        self.outbox = outbox
        self.source = source
        self.client = Client(ctx, endpoint)
        self.sender = AuditSender(outbox.pending, self.client.call, outbox.remove,
                                  label=source)
        self.lost = 0  # records that could not even be committed (disk full...)
        self._hold_until = 0.0  # after an error of our own: not a busy loop on a bad disk
        self._look_at = 0.0  # when to look for records of other processes (monotonic)

    def fileno(self) -> int:
        """Readable when the client socket may have a reply (edge-triggered: see above)."""
        return int(self.client.socket.getsockopt(zmq.FD))

    def record(self, kind: str, data: dict[str, Any], at: float | None = None) -> None:
        """Commit one record for audit_log; never raises (supervising comes first). Records
        that could not be committed are counted, and the trail says so (``records_lost``)
        as soon as the outbox takes records again."""
        at = time.time() if at is None else at
        if self.lost and self._add("records_lost", {"count": self.lost}, at):
            self.lost = 0
        if not self._add(kind, data, at):
            self.lost += 1
        self.sender.notify()

    def _add(self, kind: str, data: dict[str, Any], at: float) -> bool:
        try:
            self.outbox.add(self.source, kind, at, data)
        except (sqlite3.Error, ValueError, TypeError) as exc:
            logger.error("{}: audit record {} {} could not be kept: {}", self.source, kind,
                         data, exc)
            return False
        return True

    def wake_at(self) -> float | None:
        """When :meth:`pump` has work (monotonic time), else None: a reply wakes the fd."""
        due = self.sender.due()
        times = [t for t in (self.client.next_deadline(), self._look_at,
                             None if due is None else max(due, self._hold_until))
                 if t is not None]
        return min(times) if times else None

    def pump(self, now: float) -> None:
        """Time out calls, send what is due, read the replies (callbacks send the next
        batch); never blocks."""
        if now >= self._look_at:
            self._look_at = now + OUTBOX_LOOK_S
            self.sender.notify()
        try:
            self.client.tick(now)
            due = self.sender.due()
            if due is not None and max(due, self._hold_until) <= now:
                self.sender.tick(now)
            self.client.drain()
        except (sqlite3.Error, zmq.ZMQError) as exc:
            logger.error("{}: sending audit records failed: {}", self.source, exc)
            self._hold_until = now + RETRY_S

    def close(self) -> None:
        self.client.close()
        self.outbox.close()

"""A sender's audit records on their way to audit_log (docs/architecture.md: nothing lost).

Shared by every sender that keeps its records in a durable outbox of its own (the dispatcher,
the supervisor): the sender commits each record in its outbox first; :class:`AuditSender`
reads the outbox in order, sends one batch at a time to ``audit_log`` and lets a row go only
once audit_log has acknowledged it as durable. After a restart of either side the rows not
acknowledged are sent again under the same ``record_id`` (``{source}:{store id}:{row id}``),
which audit_log stores once.

A record audit_log refuses as *conflicting* (its id is already stored with other content: a
rollback reused the id, docs/durability.md) is not acknowledged: the row stays, and the
sender sends it again under ``{record_id}+{content digest}`` (the same name after a restart,
so stored once), logged as an error. The trail then has the first record, audit_log's
``record_conflict`` and this one: nothing acknowledged is lost.

It never blocks: it is driven by ``tick(now)`` from the sender's loop and by the reply
callback of a non-blocking MDP client call. An acknowledgement sends the next batch at once
only when the last one was full (more is surely waiting); otherwise the owner's next tick
does, so that records committed meanwhile go together: audit_log pays mostly per request
(one fsync'ed commit each), and sending again on every acknowledgement made small batches
under load, and audit_log's work per step grew with them (bench/throughput.py).
"""

from __future__ import annotations

import base64
import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

from loguru import logger

from messages.audit import (
    MAX_RECORDS_PER_APPEND,
    AppendRecords,
    AuditRecordIn,
    RecordsAcked,
    encode_record,
)
from messages.base import Message, is_plain_json
from messages.codec import Envelope
from transport.client import CallFailed

SERVICE = "audit_log"
BATCH = min(500, MAX_RECORDS_PER_APPEND)
BATCH_BYTES = 8 * 1024 * 1024
"""A batch stops growing past this much data and images: half the message size limit."""
RETRY_S = 1.0
"""After a failed batch, wait this long before sending again (audit_log may be restarting)."""
BACKLOG_EVERY_S = 5.0
"""How often a sender tells the bus its backlog (``lea:audit_backlog``, the metrics'
``lea_audit_backlog``): a count of its outbox, cheap at this pace."""
CALL_TIMEOUT_S = 5.0
"""One append of a full batch (fsync included) takes milliseconds; a batch lost with a killed
audit_log is sent again after this."""

Pending = Callable[[int, int], list[tuple[int, AuditRecordIn]]]
"""``(after row id, limit) -> [(row id, record)]``: the outbox rows not acknowledged yet, in
row order (the row id is part of the record id)."""
Call = Callable[[str, Message, Callable[[Envelope[Message] | None, CallFailed | None], None],
                 float, int], str]
"""A non-blocking client call: ``(service, message, callback, timeout_s, retries)``."""


def plain_json(value: Any) -> Any:
    """``value`` as plain JSON: bytes as ``{"base64": ...}``, tuples as lists, NaN as None,
    anything else unknown as its ``str``. ``value`` itself when it is already plain JSON
    (:func:`is_plain_json`): the same content, not a copy."""
    return value if is_plain_json(value) else _converted(value)


def _converted(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _converted(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_converted(v) for v in value]
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def checked(record: AuditRecordIn) -> tuple[AuditRecordIn, int]:
    """``record``, or in its place (same id) a ``record_refused`` saying why audit_log would
    refuse it every time (too large, not JSON): the trail shows the gap, and the records
    behind it are not held up. Also its size in bytes, for batching."""
    encoded = encode_record(record)
    if isinstance(encoded, bytes):
        return record, len(encoded) + sum(len(i) for i in record.screenshots.values())
    logger.error("{}: audit record {} ({}) cannot be stored: {}", record.source,
                 record.record_id, record.kind, encoded.message)
    stand_in = AuditRecordIn(
        record_id=record.record_id, source=record.source, kind="record_refused",
        replay_id=record.replay_id, at=record.at if math.isfinite(record.at) else 0.0,
        data={"kind": record.kind, "code": encoded.code, "problem": encoded.message[:500]})
    return stand_in, 1024


def conflict_id(record: AuditRecordIn) -> str:
    """The id a record refused as conflicting is sent again under: its id and a digest of
    its content, so that the same record gets the same name after a restart."""
    encoded = encode_record(record)
    content = encoded if isinstance(encoded, bytes) else encoded.message.encode()
    digest = hashlib.sha256(b"\0".join((
        record.source.encode(), record.kind.encode(), (record.replay_id or "").encode(),
        repr(record.at).encode(), content,
        *(hashlib.sha256(i).digest() for _, i in sorted(record.screenshots.items())),
    ))).hexdigest()[:16]
    return f"{record.record_id[:200 - 17]}+{digest}"


class AuditSender:
    """Sends committed audit records in outbox order, one batch at a time."""

    def __init__(self, pending: Pending, call: Call, acked: Callable[[list[int]], None],
                 label: str = "audit", clock: Callable[[], float] = time.monotonic) -> None:
        self._pending = pending
        self._clock = clock  # the clock of ``tick(now)``: a failure waits RETRY_S from then
        self._call = call
        self._acked = acked  # row ids audit_log has: the owner deletes them
        self._label = label  # who sends, in log lines
        self._cursor = 0  # every row up to here is acknowledged, or waits in _again
        self._again: dict[int, AuditRecordIn] = {}  # rows to send again, as they go
        self._busy = False
        self._retry_at = 0.0
        self._idle = False  # the last look found nothing to send (unknown at start)
        self.sent = 0
        self.failures = 0
        self.conflicts = 0  # records audit_log refused as conflicting, sent again renamed

    @property
    def busy(self) -> bool:
        """A batch is on its way (its reply or its timeout will come)."""
        return self._busy

    def notify(self) -> None:
        """New rows were committed: :meth:`due` says so until a tick has sent them."""
        self._idle = False

    def due(self) -> float | None:
        """When :meth:`tick` has work (the ``now`` clock; maybe already past), for an owner
        that sleeps until then; None while a batch is on its way (its reply or the client's
        timeout wakes the owner) or nothing is left to send since the last :meth:`notify`."""
        return None if self._busy or self._idle else self._retry_at

    def tick(self, now: float) -> None:
        """Send the next batch, unless one is on its way or a retry is not due."""
        if self._busy or now < self._retry_at:
            return
        ids: list[int] = []
        records: list[AuditRecordIn] = []
        size = 0
        full = False  # more is waiting: send it as soon as this batch is acknowledged
        for i, raw in [*sorted(self._again.items()), *self._pending(self._cursor, BATCH)]:
            record, n = checked(raw)
            if records and (size + n > BATCH_BYTES or len(records) >= BATCH):
                full = True
                break
            ids.append(i)
            records.append(record)
            size += n
        if not records:
            self._idle = True
            return
        full = full or len(records) >= BATCH
        self._busy = True

        def answered(reply: Envelope[Message] | None, error: CallFailed | None) -> None:
            self._busy = False
            if reply is not None and isinstance(reply.body, RecordsAcked):
                self._settle(ids, records, reply.body)
                if full or self._again:
                    self.tick(now)
                return
            why = error if error is not None else (reply.body if reply else None)
            logger.warning("{}: audit_log did not take {} record(s): {}", self._label,
                           len(ids), why)
            self.failures += 1
            self._retry_at = self._clock() + RETRY_S

        self._call(SERVICE, AppendRecords(records=records), answered, CALL_TIMEOUT_S, 0)

    def _settle(self, ids: list[int], records: list[AuditRecordIn], acked: RecordsAcked
                ) -> None:
        """Let go the rows audit_log stored; keep the others to send again."""
        stored, conflicting = set(acked.record_ids), set(acked.conflicting)
        done: list[int] = []
        for i, record in zip(ids, records, strict=True):
            self._cursor = max(self._cursor, i)
            if record.record_id in stored:
                self._again.pop(i, None)
                done.append(i)
            elif record.record_id in conflicting:
                renamed = record.model_copy(update={"record_id": conflict_id(record)})
                logger.error("{}: audit_log holds another record under {} ({}): sending it "
                             "again as {}", self._label, record.record_id, record.kind,
                             renamed.record_id)
                self.conflicts += 1
                self._again[i] = renamed
            else:  # not named either way: sent again as it is
                self._again[i] = record
        if done:
            self._done(done)

    def _done(self, ids: list[int]) -> None:
        self.sent += len(ids)
        self._acked(ids)

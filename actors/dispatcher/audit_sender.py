"""The dispatcher's audit records on their way to audit_log (DESIGN.md §8, issue: nothing lost).

Every AuditRecord effect is committed in the outbox with the decision that made it; this
sender reads the outbox in order, sends batches to ``audit_log`` and lets a row go only once
audit_log has acknowledged it as durable. After a restart of either side the rows not
acknowledged are sent again under the same ``record_id`` (store id + outbox id), which
audit_log stores once.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

from loguru import logger

from actors.dispatcher.effects import AuditRecord, Effect
from broker.client import CallFailed
from messages.audit import (
    MAX_RECORDS_PER_APPEND,
    AppendRecords,
    AuditRecordIn,
    RecordsAcked,
    encode_record,
)
from messages.base import Message
from messages.codec import Envelope

SOURCE = "dispatcher"
BATCH = min(500, MAX_RECORDS_PER_APPEND)
BATCH_BYTES = 8 * 1024 * 1024
"""A batch stops growing past this much data and images: half the message size limit."""
RETRY_S = 1.0
"""After a failed batch, wait this long before sending again (audit_log may be restarting)."""
_SCREENSHOTS = {"screenshot_before": "before", "screenshot_after": "after"}


def audit_record(store_id: str, outbox_id: int, effect: AuditRecord) -> AuditRecordIn:
    """The audit-trail form of one committed record: JSON data, images apart."""
    data = dict(effect.data)
    shots: dict[str, bytes] = {}
    report = data.get("report")
    if isinstance(report, dict):  # a report: its screenshots go to the content store
        report = dict(report)
        for field, name in _SCREENSHOTS.items():
            image = report.pop(field, None)
            if isinstance(image, bytes):
                shots[name] = image
        data["report"] = report
    at = data.pop("at", 0.0)
    replay_id = data.get("replay_id")
    return AuditRecordIn(
        record_id=f"{SOURCE}:{store_id}:{outbox_id}", source=SOURCE, kind=effect.kind,
        replay_id=replay_id if isinstance(replay_id, str) and replay_id else None,
        at=float(at), data=_json(data), screenshots=shots)


def checked(record: AuditRecordIn) -> tuple[AuditRecordIn, int]:
    """``record``, or in its place (same id) a ``record_refused`` saying why audit_log would
    refuse it every time (too large, not JSON): the trail shows the gap, and the records
    behind it are not held up. Also its size in bytes, for batching."""
    encoded = encode_record(record)
    if isinstance(encoded, bytes):
        return record, len(encoded) + sum(len(i) for i in record.screenshots.values())
    logger.error("dispatcher: audit record {} ({}) cannot be stored: {}", record.record_id,
                 record.kind, encoded.message)
    stand_in = AuditRecordIn(
        record_id=record.record_id, source=record.source, kind="record_refused",
        replay_id=record.replay_id, at=record.at,
        data={"kind": record.kind, "code": encoded.code, "problem": encoded.message[:500]})
    return stand_in, 1024


def _json(value: Any) -> Any:
    """``value`` as plain JSON: bytes as base64 text, tuples as lists, NaN as None."""
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_json(v) for v in value]
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


Call = Callable[[str, Message, Callable[[Envelope[Message] | None, CallFailed | None], None],
                 float, int], str]


class AuditSender:
    """Sends committed audit records in outbox order, one batch at a time."""

    def __init__(self, store_id: str, pending: Callable[[int, int], list[tuple[int, Effect]]],
                 call: Call, acked: Callable[[list[int]], None]) -> None:
        self.store_id = store_id
        self._pending = pending  # (after outbox id, limit) -> rows
        self._call = call
        self._acked = acked  # outbox ids audit_log has: the shell deletes them
        self._cursor = 0  # every row up to here is acknowledged
        self._busy = False
        self._retry_at = 0.0
        self.sent = 0

    def tick(self, now: float) -> None:
        """Send the next batch, unless one is on its way or a retry is not due."""
        if self._busy or now < self._retry_at:
            return
        ids: list[int] = []
        records: list[AuditRecordIn] = []
        size = 0
        for i, effect in self._pending(self._cursor, BATCH):
            if not isinstance(effect, AuditRecord):
                continue
            record, n = checked(audit_record(self.store_id, i, effect))
            if records and size + n > BATCH_BYTES:
                break
            ids.append(i)
            records.append(record)
            size += n
        if not records:
            return
        self._busy = True

        def answered(reply: Envelope[Message] | None, error: CallFailed | None) -> None:
            self._busy = False
            if reply is not None and isinstance(reply.body, RecordsAcked):
                self._done(ids)
                self.tick(now)
                return
            why = error if error is not None else (reply.body if reply else None)
            logger.warning("dispatcher: audit_log did not take {} record(s): {}", len(ids), why)
            self._retry_at = now + RETRY_S

        self._call("audit_log", AppendRecords(records=records), answered, 5.0, 0)

    def _done(self, ids: list[int]) -> None:
        self._cursor = max(self._cursor, *ids)
        self.sent += len(ids)
        self._acked(ids)

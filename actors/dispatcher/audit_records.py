"""The dispatcher's audit records as audit_log stores them (docs/architecture.md).

Every AuditRecord effect is committed in the outbox with the decision that made it; the
shared :class:`audit_outbox.sender.AuditSender` sends them from there, under the record id
``dispatcher:{store id}:{outbox id}``. This module only says what such a row becomes.
"""

from __future__ import annotations

import math

from loguru import logger
from pydantic import ValidationError

from actors.dispatcher.machine.decision import AuditRecord
from actors.dispatcher.store.dispatcher_store import DispatcherStore
from audit_outbox.sender import Pending, plain_json
from messages.audit import MAX_REPLAY_ID, AuditRecordIn

SOURCE = "dispatcher"
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
    # A report names its replay inside (report_received): the trail indexes it all the same,
    # or `audit show REPLAY_ID` would miss every report.
    replay_id = data.get("replay_id", report.get("replay_id") if isinstance(report, dict)
                         else None)
    # An agent's report may name any replay id: one the trail cannot index stays in the data
    # only (refusing the record would hold up every record behind it).
    if not isinstance(replay_id, str) or not 1 <= len(replay_id) <= MAX_REPLAY_ID:
        replay_id = None
    record_id = f"{SOURCE}:{store_id}:{outbox_id}"
    if not isinstance(at, int | float) or not math.isfinite(at):
        return _refused(record_id, effect.kind, replay_id, f"at: {at!r} is not a finite time")
    try:
        return AuditRecordIn(record_id=record_id, source=SOURCE, kind=effect.kind,
                             replay_id=replay_id, at=float(at), data=plain_json(data),
                             screenshots=shots)
    except ValidationError as exc:
        return _refused(record_id, effect.kind, replay_id, str(exc))


def _refused(record_id: str, kind: str, replay_id: str | None, problem: str) -> AuditRecordIn:
    """In place of a record that cannot even be built (never the case with the core's own
    kinds and times): built anew at every tick, it would hold up every record behind it;
    its place in the trail says why instead."""
    logger.error("dispatcher: audit record {} ({}) cannot be sent: {}", record_id, kind,
                 problem)
    return AuditRecordIn(record_id=record_id, source=SOURCE, kind="record_refused",
                         replay_id=replay_id, at=0.0,
                         data={"kind": str(kind)[:200], "code": "invalid_data",
                               "problem": problem[:500]})


def outbox_records(store: DispatcherStore) -> Pending:
    """The AuditSender's view of the outbox: its audit rows on disk, as records (a row
    staged in the turn's transaction is not sent before the turn is committed)."""
    def pending(after: int, limit: int) -> list[tuple[int, AuditRecordIn]]:
        return [(i, audit_record(store.store_id, i, effect))
                for i, effect in store.pending_outbox(limit, after, store.durable_outbox_id)
                if isinstance(effect, AuditRecord)]

    return pending

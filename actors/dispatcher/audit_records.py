"""The dispatcher's audit records as audit_log stores them (DESIGN.md §8).

Every AuditRecord effect is committed in the outbox with the decision that made it; the
shared :class:`actors.audit_sender.AuditSender` sends them from there, under the record id
``dispatcher:{store id}:{outbox id}``. This module only says what such a row becomes.
"""

from __future__ import annotations

from actors.audit_sender import Pending, plain_json
from actors.dispatcher.effects import AuditRecord
from actors.dispatcher.store import DispatcherStore
from messages.audit import AuditRecordIn

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
    return AuditRecordIn(
        record_id=f"{SOURCE}:{store_id}:{outbox_id}", source=SOURCE, kind=effect.kind,
        replay_id=replay_id if isinstance(replay_id, str) and replay_id else None,
        at=float(at), data=plain_json(data), screenshots=shots)


def outbox_records(store: DispatcherStore) -> Pending:
    """The AuditSender's view of the outbox: its audit rows, as records."""
    def pending(after: int, limit: int) -> list[tuple[int, AuditRecordIn]]:
        return [(i, audit_record(store.store_id, i, effect))
                for i, effect in store.pending_outbox(limit, after)
                if isinstance(effect, AuditRecord)]

    return pending

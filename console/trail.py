"""A replay's audit records, read from the audit_log actor (AuditQuery) and kept: records are
append-only and never change, so each later read asks only for what came after the last one.
"""

from __future__ import annotations

from collections import OrderedDict

from console.broker_link import BrokerLink
from messages.audit import MAX_PAGE_RECORDS, AuditPage, AuditQuery, AuditRecordOut

MAX_RECORDS = 5000
"""Per replay; older ones are dropped from the console's copy (the trail keeps them all)."""
MAX_REPLAYS = 32
"""Replays whose records are kept at once; the least recently read is forgotten."""


class TrailCache:
    def __init__(self, link: BrokerLink) -> None:
        self._link = link
        self._records: OrderedDict[str, list[AuditRecordOut]] = OrderedDict()
        self._after: dict[str, int] = {}

    async def records(self, replay_id: str) -> list[AuditRecordOut]:
        """Every record of ``replay_id`` so far (the last MAX_RECORDS); raises CallFailed."""
        have = self._records.get(replay_id, [])
        after = self._after.get(replay_id, 0)
        new: list[AuditRecordOut] = []
        while True:
            reply = await self._link.call("audit_log", AuditQuery(
                replay_id=replay_id, after_seq=after, limit=MAX_PAGE_RECORDS), retries=1)
            if not isinstance(reply, AuditPage):
                raise TypeError(f"audit_log answered {reply.type_name}")
            new = (new + reply.records)[-MAX_RECORDS:]
            if reply.records:
                after = reply.records[-1].seq
            if reply.next_seq is None:
                break
            after = reply.next_seq
        # Another read may have stored the same records meanwhile: keep each seq once.
        have = self._records.get(replay_id, have)
        last = have[-1].seq if have else 0
        merged = (have + [r for r in new if r.seq > last])[-MAX_RECORDS:]
        self._records[replay_id] = merged
        self._after[replay_id] = max(after, self._after.get(replay_id, 0))
        self._records.move_to_end(replay_id)
        while len(self._records) > MAX_REPLAYS:
            old, _ = self._records.popitem(last=False)
            self._after.pop(old, None)
        return merged

"""Audit records on their way to audit_log: the dispatcher's records in their audit-trail form,
and the shared sender (audit_outbox/sender.py): order, one batch at a time, retries."""

from __future__ import annotations

import base64
import enum
import math
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.dispatcher.audit_records import audit_record
from actors.dispatcher.machine.decision import AuditRecord
from audit_outbox.sender import BATCH, RETRY_S, AuditSender, checked, plain_json
from messages.audit import AppendRecords, AuditRecordIn, RecordsAcked, json_problem
from messages.base import Message, is_plain_json
from messages.codec import Envelope
from transport.client import CallFailed


def test_a_report_record_keeps_its_images_apart_and_its_data_plain_json() -> None:
    effect = AuditRecord("report_received", {
        "replay_id": "r1", "at": 12.5, "status": "accepted",
        "report": {"action_id": "s1", "screenshot_before": b"\x89PNG1",
                   "screenshot_after": b"\x89PNG2", "actual_position": (0.5, 0.25),
                   "raw": b"\x00"}})
    record = audit_record("store", 7, effect)
    assert record.record_id == "dispatcher:store:7" and record.replay_id == "r1"
    assert record.at == 12.5 and "at" not in record.data
    assert record.screenshots == {"before": b"\x89PNG1", "after": b"\x89PNG2"}
    assert "screenshot_before" not in record.data["report"]
    assert record.data["report"]["actual_position"] == [0.5, 0.25]
    assert json_problem(record.data) is None


class Wire:
    """Stands for audit_log: keeps the requests, answers when told."""

    def __init__(self) -> None:
        self.requests: list[tuple[AppendRecords, Callable[..., None]]] = []

    def call(self, service: str, message: Message, callback: Callable[..., None],
             _timeout: float, _retries: int) -> str:
        assert service == "audit_log" and isinstance(message, AppendRecords)
        self.requests.append((message, callback))
        return "id"

    def ack(self, k: int = -1) -> None:
        message, callback = self.requests[k]
        callback(Envelope("x", RecordsAcked(record_ids=[r.record_id for r in message.records])),
                 None)

    def fail(self, k: int = -1) -> None:
        self.requests[k][1](None, CallFailed("timeout", "no reply"))


def test_a_report_record_belongs_to_the_replay_its_report_names() -> None:
    """As the core writes report_received: the replay id only inside the report."""
    record = audit_record("s", 8, AuditRecord("report_received", {
        "at": 1.0, "status": "accepted", "report": {"replay_id": "r7", "action_id": "s1"}}))
    assert record.replay_id == "r7"


def dispatched(store: str, i: int) -> AuditRecordIn:
    return audit_record(store, i, AuditRecord("action_dispatched", {"replay_id": "r",
                                                                    "at": float(i)}))


def test_rows_go_only_once_acknowledged_and_a_failure_sends_them_again() -> None:
    rows = [(i, dispatched("s", i)) for i in range(1, BATCH + 11)]
    acked: list[int] = []
    wire = Wire()
    clock = [0.0]

    def pending(after: int, limit: int) -> list[tuple[int, AuditRecordIn]]:
        return [r for r in rows if r[0] > after and r[0] not in acked][:limit]

    sender = AuditSender(pending, wire.call, acked.extend, clock=lambda: clock[0])
    sender.tick(0.0)
    sender.tick(0.0)  # one batch at a time
    assert len(wire.requests) == 1 and len(wire.requests[0][0].records) == BATCH
    clock[0] = 5.0  # the call timed out 5 s after it was sent
    wire.fail()
    sender.tick(5.0 + RETRY_S / 2)  # the retry delay counts from the failure
    assert len(wire.requests) == 1 and acked == [] and sender.failures == 1
    sender.tick(5.0 + RETRY_S)
    assert [r.record_id for r in wire.requests[1][0].records] == [
        r.record_id for r in wire.requests[0][0].records]  # the same records, again
    wire.ack()  # acked: the next batch goes at once
    assert acked == list(range(1, BATCH + 1)) and len(wire.requests) == 3
    wire.ack()
    assert acked == list(range(1, BATCH + 11)) and sender.sent == BATCH + 10
    sender.tick(10.0)
    assert len(wire.requests) == 3  # nothing left to send


def test_a_dispatcher_outbox_row_is_a_record_named_by_store_and_row() -> None:
    assert dispatched("store", 42).record_id == "dispatcher:store:42"


def test_a_record_audit_log_would_always_refuse_is_sent_as_record_refused() -> None:
    record = audit_record("s", 3, AuditRecord("report_received", {
        "replay_id": "r", "at": 1.0, "text": "x" * (300 * 1024)}))
    stand_in, _size = checked(record)
    assert (stand_in.record_id, stand_in.kind) == (record.record_id, "record_refused")
    assert stand_in.data["code"] == "data_too_large"
    assert checked(audit_record("s", 4, AuditRecord("k", {"at": 1.0})))[0].kind == "k"


def test_a_batch_is_bounded_by_bytes() -> None:
    image = b"\x89PNG" + b"\x00" * (3 * 1024 * 1024)
    rows = [(i, audit_record("s", i, AuditRecord("report_received", {
        "replay_id": "r", "at": 1.0, "report": {"screenshot_after": image}})))
        for i in range(1, 6)]
    wire = Wire()
    sender = AuditSender(lambda after, n: [r for r in rows if r[0] > after][:n],
                         wire.call, lambda _ids: None)
    sender.tick(0.0)
    assert len(wire.requests[0][0].records) == 2  # 2 x 3 MiB; a third would pass 8 MiB


def test_after_a_batch_that_was_not_full_the_next_waits_for_the_owners_tick() -> None:
    """Records committed meanwhile then go together: audit_log pays per request."""
    rows = [(1, dispatched("s", 1))]
    acked: list[int] = []
    wire = Wire()
    sender = AuditSender(lambda after, n: [r for r in rows if r[0] > after][:n], wire.call,
                         acked.extend)
    sender.tick(0.0)
    rows.append((2, dispatched("s", 2)))  # committed while the first batch is on its way
    wire.ack()
    assert acked == [1] and len(wire.requests) == 1 and sender.due() is not None
    rows.append((3, dispatched("s", 3)))
    sender.tick(0.05)
    assert [r.record_id for r in wire.requests[1][0].records] == [
        "dispatcher:s:2", "dispatcher:s:3"]


def test_a_report_naming_a_replay_id_the_trail_cannot_index_is_still_recorded() -> None:
    """Any agent may send one: refusing the record would hold up every record behind it."""
    long_id = "r" * 300
    record = audit_record("s", 9, AuditRecord("report_received", {
        "at": 1.0, "status": "unknown", "report": {"replay_id": long_id, "action_id": "s1"}}))
    assert record.kind == "report_received" and record.replay_id is None
    assert record.data["report"]["replay_id"] == long_id
    assert checked(record)[0] is record


def test_a_record_that_cannot_be_built_takes_its_place_as_record_refused() -> None:
    for effect in (AuditRecord("action_dispatched", {"at": math.nan, "replay_id": "r"}),
                   AuditRecord("Not A Kind", {"at": 1.0, "replay_id": "r"})):
        record = audit_record("s", 5, effect)
        assert (record.record_id, record.kind) == ("dispatcher:s:5", "record_refused")
        assert record.replay_id == "r" and record.data["kind"] == effect.kind
        assert checked(record)[0] is record  # and audit_log takes it


def _reference(value: Any) -> Any:
    """plain_json as it was, converting everything (the fast path must give the same)."""
    if isinstance(value, dict):
        return {str(k): _reference(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_reference(v) for v in value]
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (1 == 1.0 == True is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


class _Level(enum.IntEnum):
    HIGH = 2


_scalar = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
           | st.binary(max_size=5) | st.just(_Level.HIGH) | st.just(1j))
_key = st.text(max_size=3) | st.integers(-2, 2) | st.booleans() | st.none()
_any = st.recursive(_scalar, lambda inner: (
    st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(_key, inner, max_size=3)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(value=_any)
def test_plain_json_is_the_full_conversion_and_takes_plain_data_as_is(value: Any) -> None:
    converted = plain_json(value)
    assert _same(converted, _reference(value))
    if is_plain_json(value):
        assert converted is value

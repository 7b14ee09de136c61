"""The supervisor's audit outbox (audit_outbox/store.py): a record stays until audit_log
has it, survives a restart, and its id names it forever; and its link to audit_log
(audit_outbox/audit_link.py), which never makes the supervisor wait."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from audit_outbox.audit_link import AuditLink
from audit_outbox.store import AuditOutbox
from tests.conftest import free_port


def test_rows_wait_in_order_survive_a_reopen_and_keep_their_ids(tmp_path: Path) -> None:
    outbox = AuditOutbox.in_dir(tmp_path)
    store = outbox.store_id
    e = 1 << 32  # the first epoch's ids (runtime/sqlite_store.py)
    for i in range(5):
        outbox.add("supervisor", "actor_started", 100.0 + i, {"name": f"a{i}", "pid": i})
    assert [row for row, _ in outbox.pending(0, 3)] == [e + 1, e + 2, e + 3]
    assert [row for row, _ in outbox.pending(e + 3, 10)] == [e + 4, e + 5]
    outbox.remove([e + 1, e + 2])
    outbox.close()

    again = AuditOutbox.in_dir(tmp_path)  # the supervisor restarted: the rest is still there
    assert again.store_id == store and again.count() == 3
    (row, record), *_ = again.pending(0, 10)
    assert (row, record.record_id) == (e + 3, f"supervisor:{store}:{e + 3}")
    assert (record.source, record.kind, record.at, record.replay_id) == (
        "supervisor", "actor_started", 102.0, None)
    assert record.data == {"name": "a2", "pid": 2}
    again.remove([e + 3, e + 4, e + 5])
    # Never an id again, even one a cut could have rolled back: a new epoch at each open.
    assert again.add("supervisor", "tree_stopped", 200.0, {}) == 2 * e + 1
    again.close()


def test_a_record_that_is_not_json_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    outbox = AuditOutbox.in_dir(tmp_path)
    with pytest.raises(ValueError):
        outbox.add("supervisor", "actor_exited", 1.0, {"x": math.nan})
    with pytest.raises(TypeError):
        outbox.add("supervisor", "actor_exited", 1.0, {"x": object()})
    assert outbox.count() == 0
    outbox.close()


def test_a_new_database_is_a_new_store(tmp_path: Path) -> None:
    first = AuditOutbox(tmp_path / "a.sqlite3")
    second = AuditOutbox(tmp_path / "b.sqlite3")
    assert first.store_id != second.store_id  # so their row ids never collide in the trail
    first.close()
    second.close()


def test_the_link_never_waits_for_audit_log_and_says_when_records_were_lost(
        tmp_path: Path) -> None:
    """Nobody listens at the endpoint (the broker is down): recording and pumping return at
    once, the batch waits for its timeout, the records stay in the outbox."""
    ctx: zmq.Context[Any] = zmq.Context()
    link = AuditLink(ctx, f"tcp://127.0.0.1:{free_port()}", AuditOutbox.in_dir(tmp_path),
                     "supervisor")
    try:
        link.record("actor_started", {"name": "a", "pid": 1})
        link.record("actor_exited", {"name": "a", "pid": 1, "bad": math.nan})  # not kept
        assert link.lost == 1
        link.record("actor_started", {"name": "a", "pid": 2})
        assert link.lost == 0
        assert [(r.kind, r.data) for _row, r in link.outbox.pending(0, 10)] == [
            ("actor_started", {"name": "a", "pid": 1}), ("records_lost", {"count": 1}),
            ("actor_started", {"name": "a", "pid": 2})]
        now = time.monotonic()
        assert link.wake_at() == 0.0  # rows to send: at once
        link.pump(now)
        assert link.sender.busy  # one batch on its way, nobody to answer it
        wake = link.wake_at()
        assert wake is not None and wake > now  # its timeout, then a retry
        link.pump(now)
        assert link.outbox.count() == 3  # kept until acknowledged
    finally:
        link.close()
        ctx.term()

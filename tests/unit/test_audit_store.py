"""The audit store on a real SQLite file: idempotent appends, content-addressed screenshots,
tampering found and named by the verify walk, retention that keeps the chain valid, and the
checks a request must pass before anything is written."""

from __future__ import annotations

import hashlib
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.audit_log.chain import Anchor, Verdict, verify
from actors.audit_log.evidence import Evidence
from actors.audit_log.image_seal import sealed_size
from actors.audit_log.store.audit_store import (
    CONFLICT_KIND,
    AuditStore,
    audit_paths,
    iter_chain,
    open_readonly,
    read_anchor,
)
from messages.audit import (
    MAX_RECORDS_PER_APPEND,
    MAX_SCREENSHOT_BYTES,
    AppendRecords,
    AuditRecordIn,
    check_append,
)
from tests.audit_helpers import alter_byte, insert_forged, store_records


def rec(i: int, replay: str = "rp", **extra: object) -> AuditRecordIn:
    fields: dict[str, object] = {
        "record_id": f"{replay}:{i}", "source": "dispatcher", "kind": "action_dispatched",
        "replay_id": replay, "at": 1000.0 + i, "data": {"action_id": f"s{i}", "n": i}}
    fields.update(extra)
    return AuditRecordIn.model_validate(fields)


def walk(data_dir: Path, with_anchor: bool = True) -> Verdict:
    db_path, _shots, anchor_path = audit_paths(data_dir)
    anchor = read_anchor(anchor_path) if with_anchor else None
    db = open_readonly(db_path)
    try:
        return verify(iter_chain(db, batch=7), anchors=[anchor] if anchor else [])
    finally:
        db.close()


def tamper(data_dir: Path, *sql: str) -> None:
    db = sqlite3.connect(audit_paths(data_dir)[0])
    for statement in sql:
        db.execute(statement)
    db.commit()
    db.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[AuditStore]:
    s = AuditStore(tmp_path)
    yield s
    s.close()


def test_append_is_idempotent_by_record_id(store: AuditStore, tmp_path: Path) -> None:
    first = store_records(store, [rec(i) for i in range(10)], now=5000.0)
    assert first.outcomes == ["stored"] * 10 and first.head_seq == 10
    again = store_records(store, [rec(3), rec(10), rec(3), rec(4)], now=5001.0)
    assert again.outcomes == ["duplicate", "stored", "duplicate", "duplicate"]
    assert store.count() == 11
    assert walk(tmp_path).intact


def test_a_resend_with_other_content_keeps_the_first_and_records_the_attempt(
    store: AuditStore, tmp_path: Path
) -> None:
    store_records(store, [rec(1)], now=5000.0)
    result = store_records(store, [rec(1, data={"action_id": "s1", "n": 999})], now=5001.0)
    assert result.outcomes == ["conflicting"]
    rows, _ = store.page(after_seq=0, limit=10)
    assert rows[0].data == {"action_id": "s1", "n": 1}
    assert rows[1].source == "audit_log" and rows[1].kind == CONFLICT_KIND
    assert rows[1].data["record_id"] == "rp:1" and rows[1].data["stored_seq"] == 1
    assert walk(tmp_path).intact


def test_screenshots_are_stored_once_by_hash_before_the_commit(
    store: AuditStore, tmp_path: Path
) -> None:
    image = b"\x89PNG fake" * 100
    store_records(store, [rec(1, screenshots={"before": image, "after": b"other"}),
                  rec(2, screenshots={"before": image})], now=5000.0)
    digest = hashlib.sha256(image).hexdigest()
    path = audit_paths(tmp_path)[1] / digest[:2] / digest
    assert image not in path.read_bytes()  # sealed (image_seal.py)
    assert store.files.read(digest) == image
    rows, _ = store.page(after_seq=0, limit=10)
    assert rows[0].screenshots["before"] == rows[1].screenshots["before"] == digest
    assert sum(1 for p in audit_paths(tmp_path)[1].rglob("*") if p.is_file()) == 2
    assert store.screenshot_state({digest}) == {digest: "stored"}


def test_a_failed_append_stores_nothing(store: AuditStore, tmp_path: Path) -> None:
    store_records(store, [rec(1)], now=5000.0)
    image = b"cannot be written"
    digest = hashlib.sha256(image).hexdigest()
    (audit_paths(tmp_path)[1] / digest[:2]).write_bytes(b"")  # a file where a dir must be
    with pytest.raises(OSError):
        store_records(store, [rec(2), rec(3, screenshots={"x": image})], now=5001.0)
    assert store.count() == 1
    assert store_records(store, [rec(2)], now=5002.0).outcomes == ["stored"]
    assert walk(tmp_path).intact


def test_stored_at_never_goes_backwards(store: AuditStore) -> None:
    store_records(store, [rec(1)], now=5000.0)
    store_records(store, [rec(2)], now=4000.0)  # the clock was stepped back
    rows, _ = store.page(after_seq=0, limit=10)
    assert [r.stored_at for r in rows] == [5000.0, 5000.0]


def test_pages_filter_by_replay_and_by_stored_time(store: AuditStore) -> None:
    store_records(store, [rec(i, "a") for i in range(5)], now=100.0)
    store_records(store, [rec(i, "b") for i in range(5)], now=200.0)
    store_records(store, [rec(i, "a") for i in range(5, 8)], now=300.0)
    seen, after = [], 0
    while True:
        rows, nxt = store.page(after_seq=after, limit=3, replay_id="a")
        seen += [r.record_id for r in rows]
        if nxt is None:
            break
        after = nxt
    assert seen == [f"a:{i}" for i in range(8)]
    rows, nxt = store.page(after_seq=0, limit=100, since=200.0)
    assert [r.seq for r in rows] == list(range(6, 14)) and nxt is None
    rows, nxt = store.page(after_seq=0, limit=100, max_bytes=1)  # always one, then stops
    assert len(rows) == 1 and nxt == 1


@pytest.mark.parametrize(("sql", "seq", "record_id", "reason"), [
    (["""UPDATE records SET data = replace(data, '"n":6', '"n":7') WHERE seq = 7"""],
     7, "rp:6", "altered"),
    (["UPDATE records SET data = replace(data, ':', ': ') WHERE seq = 4"],  # not canonical
     4, "rp:3", "altered"),
    (["UPDATE records SET at = at + 1 WHERE seq = 12"], 12, "rp:11", "altered"),
    (["DELETE FROM records WHERE seq = 9"], 10, "rp:9", "removed"),
    (["DELETE FROM records WHERE seq = 1"], 2, "rp:1", "removed"),
    (["DELETE FROM records WHERE seq = 20"], 20, None, "removed"),  # the anchor tells
])
def test_tampering_is_found_and_named(store: AuditStore, tmp_path: Path, sql: list[str],
                                      seq: int, record_id: str | None, reason: str) -> None:
    store_records(store, [rec(i) for i in range(20)], now=5000.0)
    assert walk(tmp_path).intact
    tamper(tmp_path, *sql)
    broken = walk(tmp_path).broken
    assert broken is not None, "verify missed the tampering"
    assert (broken.seq, broken.record_id, broken.reason) == (seq, record_id, reason)


def test_an_inserted_record_is_named(store: AuditStore, tmp_path: Path) -> None:
    store_records(store, [rec(i) for i in range(20)], now=5000.0)
    insert_forged(audit_paths(tmp_path)[0], after_seq=5)
    broken = walk(tmp_path).broken
    assert broken is not None
    assert (broken.seq, broken.record_id, broken.reason) == (6, "forged", "inserted")


def test_one_altered_byte_is_named(store: AuditStore, tmp_path: Path) -> None:
    store_records(store, [rec(i) for i in range(20)], now=5000.0)
    alter_byte(audit_paths(tmp_path)[0], 13)
    broken = walk(tmp_path).broken
    assert broken is not None
    assert (broken.seq, broken.record_id, broken.reason) == (13, "rp:12", "altered")


def test_pruning_removes_files_keeps_hashes_and_the_chain(store: AuditStore,
                                                         tmp_path: Path) -> None:
    store_records(store, [rec(1, screenshots={"a": b"old"})], now=1000.0)
    store_records(store, [rec(2, screenshots={"a": b"new"})], now=1000.0 + 5 * 86400)
    old, new = (hashlib.sha256(x).hexdigest() for x in (b"old", b"new"))
    done = store.prune_screenshots(3.0, "carol", now=1000.0 + 6 * 86400)
    sealed = sealed_size(store.cipher.current or "", 3)  # the bytes on disk
    assert (done.files_removed, done.bytes_freed, done.seq) == (1, sealed, 3)
    assert not store.files.exists(old) and store.files.exists(new)
    assert store.screenshot_state({old, new}) == {old: "pruned", new: "stored"}
    assert store.prune_screenshots(3.0, None, now=1000.0 + 6 * 86400).seq is None
    rows, _ = store.page(after_seq=0, limit=10)
    assert rows[0].screenshots == {"a": old}  # the hash stays
    assert rows[2].data["operator"] == "carol"
    evidence = Evidence()
    for row in rows:
        evidence.add(row)
    states = {d: store.files.state(d) for d in evidence.last_ref}
    assert evidence.problems(states) == []
    assert walk(tmp_path).intact
    store_records(store, [rec(3, screenshots={"a": b"old"})], now=1000.0 + 7 * 86400)  # seen again
    assert store.files.exists(old) and store.screenshot_state({old}) == {old: "stored"}


def test_a_large_prune_goes_in_bounded_batches(store: AuditStore, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("actors.audit_log.store.audit_store.PRUNE_BATCH", 2)
    store_records(store, [rec(i, screenshots={"a": b"img%d" % i}) for i in range(5)],
                  now=1000.0)
    rounds = []
    while True:
        done = store.prune_screenshots(1.0, None, now=1000.0 + 2 * 86400)
        rounds.append(done.files_removed)
        if not done.more:
            break
    assert sum(rounds) == 5 and max(rounds) == 2
    assert not list(store.files.digests())
    rows, _ = store.page(after_seq=0, limit=100)
    evidence = Evidence()
    for row in rows:
        evidence.add(row)
    assert evidence.problems({d: store.files.state(d) for d in evidence.last_ref}) == []
    assert walk(tmp_path).intact


def test_a_missing_file_that_no_prune_explains_is_a_problem(store: AuditStore) -> None:
    store_records(store, [rec(1, screenshots={"a": b"evidence"})], now=1000.0)
    digest = hashlib.sha256(b"evidence").hexdigest()
    store.files.path(digest).unlink()
    rows, _ = store.page(after_seq=0, limit=10)
    evidence = Evidence()
    evidence.add(rows[0])
    problems = evidence.problems({digest: store.files.state(digest)})
    assert [(p.reference.record_id, p.state) for p in problems] == [("rp:1", "missing")]
    assert store.screenshot_state({digest}) == {digest: "missing"}


def test_the_anchor_file_follows_the_head(store: AuditStore, tmp_path: Path) -> None:
    store_records(store, [rec(i) for i in range(3)], now=1.0)
    store_records(store, [rec(3)], now=1.0)  # within the second: not written yet
    store.flush_anchor()
    seq, digest, _ = store.head()
    assert read_anchor(audit_paths(tmp_path)[2]) == Anchor(seq, digest) == Anchor(4, digest)


@pytest.mark.parametrize(("records", "code"), [
    ([], "empty_append"),
    ([rec(i) for i in range(MAX_RECORDS_PER_APPEND + 1)], "too_many_records"),
    ([rec(1), rec(2, source="audit_log")], "reserved_source"),
    ([rec(1, data={"img": b"png"})], "invalid_data"),
    ([rec(1, data={"x": [1, {"y": math.inf}]})], "invalid_data"),
    ([rec(1, data={"x": {b"k": "y"}})], "invalid_data"),
    ([rec(1, data={"s": "\ud800"})], "invalid_data"),
    ([rec(1, at=math.nan)], "invalid_data"),
    ([rec(1, replay_id="a\x00b")], "invalid_data"),  # PostgreSQL's text cannot hold it
    ([rec(1, data={"x": "y" * 300_000})], "data_too_large"),
    ([rec(1, screenshots={f"s{i}": b"x" for i in range(9)})], "too_many_screenshots"),
    ([rec(1, screenshots={"big": b"x" * (MAX_SCREENSHOT_BYTES + 1)})], "screenshot_too_large"),
])
def test_requests_that_cannot_be_stored_are_refused_whole(records: list[AuditRecordIn],
                                                          code: str) -> None:
    problem = check_append(AppendRecords.model_construct(records=records))
    assert problem is not None and problem.code == code
    assert check_append(AppendRecords(records=[rec(1), rec(2, data={"ok": [1.5, None]})])) \
        is None

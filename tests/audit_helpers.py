"""Audit trail test helpers: store records as the actor does, and what a person with write
access to ``audit.db`` could do to it: alter a byte, delete a record, insert a record
(forged by someone who knows the hashing scheme), for the tests that check ``audit
verify`` names the record."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from actors.audit_log.chain import canonical, seal
from actors.audit_log.store.audit_store import AppendResult, AuditStore, chain_record
from messages.audit import AppendProblem, AppendRecords, AuditRecordIn, encode_append


def store_records(store: AuditStore, records: Sequence[AuditRecordIn],
                  now: float) -> AppendResult:
    """Append as the actor does: check and encode the request, then store it."""
    encoded = encode_append(AppendRecords(records=list(records)))
    assert not isinstance(encoded, AppendProblem), encoded
    return store.append(records, encoded, now)


def _run(db_path: Path, *sql: str, args: tuple[object, ...] = ()) -> None:
    db = sqlite3.connect(db_path)
    for statement in sql:
        db.execute(statement, args if "?" in statement else ())
    db.commit()
    db.close()


def alter_byte(db_path: Path, seq: int) -> None:
    """Change one character of the record's data (its first digit)."""
    db = sqlite3.connect(db_path)
    (data,) = db.execute("SELECT data FROM records WHERE seq = ?", (seq,)).fetchone()
    db.close()
    i = next(i for i, ch in enumerate(data) if ch.isdigit())
    altered = data[:i] + str((int(data[i]) + 1) % 10) + data[i + 1:]
    _run(db_path, "UPDATE records SET data = ? WHERE seq = ?", args=(altered, seq))


def delete(db_path: Path, seq: int) -> None:
    _run(db_path, f"DELETE FROM records WHERE seq = {int(seq)}")


def insert_forged(db_path: Path, after_seq: int, record_id: str = "forged") -> None:
    """Shift the records after ``after_seq`` up by one and seal a record in the gap."""
    db = sqlite3.connect(db_path)
    before = chain_record(db.execute("SELECT * FROM records WHERE seq = ?",
                                     (after_seq,)).fetchone())
    db.close()
    fake = seal(before.hash, {**before.content(), "seq": after_seq + 1,
                              "record_id": record_id, "data": {"operator": "mallory"}})
    _run(db_path, f"UPDATE records SET seq = -seq WHERE seq > {int(after_seq)}",
         "UPDATE records SET seq = 1 - seq WHERE seq < 0")
    _run(db_path, "INSERT INTO records (seq, record_id, source, kind, replay_id, at, stored_at,"
         " data, screenshots, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
         args=(fake.seq, fake.record_id, fake.source, fake.kind, fake.replay_id, fake.at,
               fake.stored_at, canonical(fake.data).decode(),
               canonical(fake.screenshots).decode(), fake.prev_hash, fake.hash))

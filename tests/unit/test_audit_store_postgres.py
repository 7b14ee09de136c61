"""The audit store on a real PostgreSQL server (tests/postgres.py, one per session): appends
stored once (the database refuses a second copy itself), screenshots in the database,
tampering found and named by the verify walk, and two processes appending at once making one
chain."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from actors.audit_log.chain import Verdict, verify
from actors.audit_log.evidence import Evidence
from actors.audit_log.image_keys import ImageCipher
from actors.audit_log.image_seal import sealed_size
from actors.audit_log.store.audit_store import AuditStore, iter_chain, read_anchor
from actors.audit_log.store.db import default_keyring
from actors.audit_log.store.postgres import PgAuditDb
from tests.audit_helpers import store_records
from tests.conftest import ROOT
from tests.unit.test_audit_store import rec


def cipher(data_dir: Path) -> ImageCipher:
    """The image keyring a store in ``data_dir`` uses (loaded, or made, by the store)."""
    return ImageCipher(default_keyring(data_dir))


def walk(url: str, data_dir: Path | None = None) -> Verdict:
    """``audit verify``'s walk, read-only, with the anchor file when ``data_dir`` is given."""
    db = PgAuditDb.open_readonly(url)
    anchor = read_anchor(data_dir / "audit" / db.anchor_name) if data_dir else None
    try:
        with db.snapshot():
            return verify(iter_chain(db, batch=7), anchors=[anchor] if anchor else [])
    finally:
        db.close()


def tamper(url: str, *sql: str) -> None:
    with psycopg.connect(url, options="-c search_path=audit", autocommit=True) as conn:
        for statement in sql:
            conn.execute(statement.encode())


@pytest.fixture
def store(tmp_path: Path, pg_url: str) -> Iterator[AuditStore]:
    s = AuditStore(tmp_path, PgAuditDb.connect(pg_url, cipher(tmp_path)))
    yield s
    s.close()


def test_append_is_idempotent_and_the_database_itself_refuses_a_second_copy(
        store: AuditStore, pg_url: str, tmp_path: Path) -> None:
    first = store_records(store, [rec(i) for i in range(10)], now=5000.0)
    assert first.outcomes == ["stored"] * 10 and first.head_seq == 10
    again = store_records(store, [rec(3), rec(10), rec(3), rec(4)], now=5001.0)
    assert again.outcomes == ["duplicate", "stored", "duplicate", "duplicate"]
    assert store.count() == 11
    store.flush_anchor()
    assert walk(pg_url, tmp_path).intact
    with pytest.raises(psycopg.errors.UniqueViolation):  # record_id UNIQUE, in the database
        tamper(pg_url, "INSERT INTO records SELECT seq + 100, record_id, source, kind, "
               "replay_id, at, stored_at, data, screenshots, prev_hash, hash FROM records "
               "WHERE seq = 1")
    conflict = store_records(store, [rec(1, data={"action_id": "s1", "n": 999})], now=5002.0)
    assert conflict.outcomes == ["conflicting"]
    rows, _ = store.page(after_seq=0, limit=100)
    assert rows[1].data == {"action_id": "s1", "n": 1}  # the first is kept
    assert rows[-1].kind == "record_conflict" and rows[-1].data["record_id"] == "rp:1"
    assert walk(pg_url).intact


def test_screenshots_are_kept_in_the_database_and_pruned_with_their_hash_kept(
        store: AuditStore, pg_url: str) -> None:
    old, new = b"\x89PNG old" * 50, b"\x89PNG new" * 50
    store_records(store, [rec(1, screenshots={"a": old, "b": new}),
                          rec(2, screenshots={"a": old})], now=1000.0)
    store_records(store, [rec(3, screenshots={"a": new})], now=1000.0 + 5 * 86400)
    d_old, d_new = (hashlib.sha256(x).hexdigest() for x in (old, new))
    assert store.files.read(d_old) == old and sorted(store.files.digests()) == sorted(
        [d_old, d_new])
    done = store.prune_screenshots(3.0, "carol", now=1000.0 + 6 * 86400)
    sealed = sealed_size(store.cipher.current or "", len(old))  # the bytes stored
    assert (done.files_removed, done.bytes_freed) == (1, sealed)
    assert store.screenshot_state({d_old, d_new}) == {d_old: "pruned", d_new: "stored"}
    with pytest.raises(FileNotFoundError):
        store.files.read(d_old)
    rows, _ = store.page(after_seq=0, limit=10)
    assert rows[0].screenshots["a"] == d_old  # the hash stays in the chain
    evidence = Evidence()
    for row in rows:
        evidence.add(row)
    assert evidence.problems({d: store.files.state(d) for d in evidence.last_ref}) == []
    tamper(pg_url, f"UPDATE images SET data = 'x'::bytea WHERE sha256 = '{d_new}'")
    assert store.files.state(d_new) == "corrupt"
    assert walk(pg_url).intact


@pytest.mark.parametrize(("sql", "seq", "record_id", "reason"), [
    ("""UPDATE records SET data = replace(data, '"n":6', '"n":7') WHERE seq = 7""",
     7, "rp:6", "altered"),
    ("UPDATE records SET at = at + 1 WHERE seq = 12", 12, "rp:11", "altered"),
    ("DELETE FROM records WHERE seq = 9", 10, "rp:9", "removed"),
    ("DELETE FROM records WHERE seq = 20", 20, None, "removed"),  # the anchor tells
])
def test_tampering_is_found_and_named(store: AuditStore, pg_url: str, tmp_path: Path,
                                      sql: str, seq: int, record_id: str | None,
                                      reason: str) -> None:
    store_records(store, [rec(i) for i in range(20)], now=5000.0)
    store.flush_anchor()
    assert walk(pg_url, tmp_path).intact
    tamper(pg_url, sql)
    broken = walk(pg_url, tmp_path).broken
    assert broken is not None, "verify missed the tampering"
    assert (broken.seq, broken.record_id, broken.reason) == (seq, record_id, reason)


BATCHES = 60
_WRITER = f"""
import sys, time
import psycopg
from pathlib import Path
from actors.audit_log.image_keys import ImageCipher
from actors.audit_log.store.postgres import PgAuditDb
from actors.audit_log.store.audit_store import AuditStore
from actors.audit_log.store.db import default_keyring
from tests.audit_helpers import store_records
from tests.unit.test_audit_store import rec

url, name, data_dir, go = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
# One keyring for both, as on two servers of one trail (docs/operations.md).
store = AuditStore(data_dir, PgAuditDb.connect(url, ImageCipher(default_keyring(data_dir.parent))))
while not go.exists():  # both start appending together
    time.sleep(0.01)
for b in range({BATCHES}):
    # Its own records, and a batch both writers send (stored once between them).
    mine = [rec(b * 10 + i, replay=name) for i in range(10)]
    shared = [rec(b, replay="both", screenshots={{"s": b"img-%d" % b}})]
    while True:  # as a sender: again when the lock was not had in time (a busy machine)
        try:
            store_records(store, mine + shared, now=time.time())
            break
        except psycopg.errors.LockNotAvailable:
            pass
store.close()
"""


def test_two_processes_appending_at_once_make_one_chain(pg_url: str, tmp_path: Path) -> None:
    # The tables (and the keyring), before the race.
    AuditStore(tmp_path, PgAuditDb.connect(pg_url, cipher(tmp_path))).close()
    go = tmp_path / "go"
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, pg_url, name,
                                 str(tmp_path / name), str(go)], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
               for name in ("w1", "w2")]
    go.touch()
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    verdict = walk(pg_url)
    assert verdict.intact, verdict.broken
    db = PgAuditDb.open_readonly(pg_url)
    try:
        ids = [r.record_id for r in iter_chain(db)]
    finally:
        db.close()
    expected = {f"{w}:{n}" for w in ("w1", "w2") for n in range(BATCHES * 10)} | {
        f"both:{b}" for b in range(BATCHES)}
    assert len(ids) == len(set(ids)) == verdict.records == len(expected)  # none doubled
    assert set(ids) == expected  # none lost
    # Interleaved: the two writers really appended at the same time.
    order = [i.split(":")[0] for i in ids if not i.startswith("both")]
    assert sum(1 for a, b in itertools.pairwise(order) if a != b) > 1


_HOLDER = """
import sys, time
from pathlib import Path
from actors.audit_log.image_keys import ImageCipher
from actors.audit_log.store.postgres import PgAuditDb

db = PgAuditDb.connect(sys.argv[1], ImageCipher(None))
with db.appending():  # the chain's lock, then silence: a writer frozen or cut off
    print("holding", flush=True)
    time.sleep(600)
"""


def test_a_writer_silent_while_it_holds_the_chain_lock_loses_it(store: AuditStore,
                                                                pg_url: str) -> None:
    """The others are refused (each append waits LOCK_WAIT_S at most: the actor's loop goes
    on) until the server ends the silent one's session, IDLE_IN_TRANSACTION_S later; not
    until TCP gives up on it."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, pg_url], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE)
    refused = 0
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"holding\n"
        while True:  # as the sender: again after a refusal
            try:
                done = store_records(store, [rec(1)], now=5000.0)
                break
            except psycopg.errors.LockNotAvailable:
                refused += 1
        assert done.outcomes == ["stored"] and refused >= 1
    finally:
        holder.kill()
        holder.wait()
    assert walk(pg_url).intact

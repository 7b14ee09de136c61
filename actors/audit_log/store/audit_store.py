"""The audit trail's store, owned by the audit_log actor: the SQL, written once, on an
:class:`~actors.audit_log.store.db.AuditDb`: SQLite in the data directory (``audit.db``, the
embedded default) or PostgreSQL (``LEA_DATABASE_URL``, postgres.py).

Durability: the actor acknowledges a request only once its COMMIT has returned, durable
(SQLite: WAL with ``synchronous=FULL``; PostgreSQL: ``synchronous_commit = on``). Every
record of one request is appended in one transaction (all or nothing), after the screenshots
it references are stored. The chain is extended inside a transaction that holds the chain's
lock from its start (SQLite ``BEGIN IMMEDIATE``; PostgreSQL the ``chain_lock`` row ``FOR
UPDATE``), from the head read in that transaction: several writers (two audit_log
processes on one PostgreSQL database) cannot fork it. ``stored_at`` never goes backwards (a
clock stepped back keeps the last value), so "stored since T" is always a suffix of the
chain.

The head (``seq:hash``) is also kept in ``<data_dir>/audit/head.json`` (``head.pg.json``
on PostgreSQL; at most a second behind): an anchor outside the database, with which ``audit
verify`` notices records cut off the end (which a chain alone cannot show).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actors.audit_log.chain import (
    GENESIS,
    Anchor,
    ChainRecord,
    canonical,
    chain_hash,
    content_bytes,
    seal,
)
from actors.audit_log.evidence import PRUNE_KIND
from actors.audit_log.image_keys import ImageCipher
from actors.audit_log.screenshots import digest_of
from actors.audit_log.store.db import DB_NAME, AuditDb, Reader, SqliteAuditDb, audit_paths
from messages.audit import RESERVED_SOURCE, AuditRecordIn, ScreenshotState
from runtime.durability import fsync_dir, write_atomic

__all__ = ["CONFLICT_KIND", "DB_NAME", "KEY_ROTATED_KIND", "AppendResult", "AuditStore",
           "PruneResult", "audit_paths", "chain_record", "iter_chain", "open_readonly",
           "read_anchor"]

CONFLICT_KIND = "record_conflict"
KEY_ROTATED_KIND = "image_key_rotated"
_COLUMNS = ("seq, record_id, source, kind, replay_id, at, stored_at, data, screenshots, "
            "prev_hash, hash")
PRUNE_BATCH = 5000
"""Images pruned per request at most, so one request never holds the loop for long."""
MAX_PAGE_BYTES = 4 * 1024 * 1024
"""A query page stops past this much data (records hold up to 256 KiB each)."""


Outcome = Literal["stored", "duplicate", "conflicting"]
ANCHOR_INTERVAL_S = 1.0


@dataclass(slots=True)
class AppendResult:
    outcomes: list[Outcome] = field(default_factory=list)
    """One per record given, in order: ``duplicate`` (already stored, same content) and
    ``conflicting`` (already stored, other content: the first is kept) are not stored."""
    head_seq: int = 0

    def ids(self, records: Sequence[AuditRecordIn], outcome: Outcome) -> list[str]:
        return [r.record_id for r, o in zip(records, self.outcomes, strict=True) if o == outcome]


@dataclass(frozen=True, slots=True)
class PruneResult:
    files_removed: int
    bytes_freed: int
    cutoff: float
    seq: int | None
    more: bool  # PRUNE_BATCH reached: ask again


def _row(r: ChainRecord) -> tuple[Any, ...]:
    return (r.seq, r.record_id, r.source, r.kind, r.replay_id, r.at, r.stored_at,
            canonical(r.data).decode(), canonical(r.screenshots).decode(), r.prev_hash, r.hash)


def _parsed(text: Any, name: str) -> tuple[Any, str | None]:
    """A stored JSON column, and a problem if it is unreadable or not canonical."""
    if not isinstance(text, str):
        return {}, f"{name} is not text"
    try:
        value = json.loads(text)
    except ValueError:
        return {}, f"{name} is not JSON"
    if not isinstance(value, dict):
        return {}, f"{name} is not a JSON object"
    if canonical(value) != text.encode("utf-8"):
        return value, f"{name} is not in canonical form"
    return value, None


def chain_record(row: Sequence[Any]) -> ChainRecord:
    """A database row as the chain sees it; ``problem`` names a damaged column."""
    seq, record_id, source, kind, replay_id, at, stored_at, data, shots, prev, digest = row
    data_value, problem = _parsed(data, "data")
    shots_value, shots_problem = _parsed(shots, "screenshots")
    problem = problem or shots_problem
    texts = {"record_id": record_id, "source": source, "kind": kind, "prev_hash": prev,
             "hash": digest}
    for name, value in texts.items():
        if not isinstance(value, str):
            problem = problem or f"{name} is not text"
    if replay_id is not None and not isinstance(replay_id, str):
        problem = problem or "replay_id is not text"
    for name, value in (("at", at), ("stored_at", stored_at)):
        if not isinstance(value, float):
            problem = problem or f"{name} is not a number"
    if not isinstance(prev, str) or len(prev) != 64:
        prev, problem = GENESIS, problem or "prev_hash is not a sha256"
    return ChainRecord(int(seq), str(record_id), str(source), str(kind),
                       replay_id if isinstance(replay_id, str) else None,
                       at if isinstance(at, float) else 0.0,
                       stored_at if isinstance(stored_at, float) else 0.0,
                       data_value, shots_value, str(prev), str(digest), problem)


def open_readonly(path: Path) -> sqlite3.Connection:
    """The database for reading only (``audit verify``); FileNotFoundError if absent."""
    if not path.is_file():
        raise FileNotFoundError(path)
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


def iter_chain(db: Reader, batch: int = 2000) -> Iterator[ChainRecord]:
    """Every record in seq order, read in pages (constant memory)."""
    after = -1
    while True:
        rows = db.execute(f"SELECT {_COLUMNS} FROM records WHERE seq > ? ORDER BY seq LIMIT ?",
                          (after, batch)).fetchall()
        for row in rows:
            yield chain_record(row)
        if len(rows) < batch:
            return
        after = rows[-1][0]


def read_anchor(path: Path) -> Anchor | None:
    """The head anchor file, or None if absent or unreadable."""
    try:
        raw = json.loads(path.read_text())
        return Anchor(int(raw["seq"]), str(raw["hash"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class AuditStore:
    """The audit trail and its screenshots; one instance per process, one thread."""

    def __init__(self, data_dir: Path, db: AuditDb | None = None) -> None:
        """The trail in ``db``, or in SQLite in ``data_dir``; the head anchor in
        ``data_dir`` either way."""
        self._db: AuditDb = db if db is not None else SqliteAuditDb.open(data_dir)
        self.where = self._db.where
        self.files = self._db.images
        self.cipher: ImageCipher = self.files.cipher
        self._keys_noted = {k for (k,) in self._db.execute("SELECT key_id FROM image_keys")}
        # A keyring is made only for a trail that never sealed an image: in place of a lost
        # one, it would hide the loss (image_keys.py).
        self.cipher.required = set(self._keys_noted)
        self.cipher.load(create=not self._keys_noted)
        self.anchor_path = data_dir / "audit" / self._db.anchor_name
        if not self.anchor_path.parent.is_dir():  # (PostgreSQL: nothing else made it)
            self.anchor_path.parent.mkdir(parents=True)
            for directory in (data_dir, self.anchor_path.parent):  # their names, durable
                fsync_dir(directory)
        seq, digest, _at = self.head()
        self._head = self._anchored = Anchor(seq, digest)
        self._anchored_at = 0.0
        self._finish_prunes()

    def close(self) -> None:
        try:
            self.flush_anchor()
        finally:
            self._db.close()

    def head(self) -> tuple[int, str, float]:
        """(seq, hash, stored_at) of the last record; (0, GENESIS, 0.0) when empty."""
        row = self._db.execute(
            "SELECT seq, hash, stored_at FROM records ORDER BY seq DESC LIMIT 1").fetchone()
        return (row[0], row[1], row[2]) if row else (0, GENESIS, 0.0)

    def count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM records").fetchone()[0])

    # Appending ----------------------------------------------------------------------------

    def append(self, records: Sequence[AuditRecordIn], data: Sequence[bytes],
               now: float) -> AppendResult:
        """Store the records not already present, durably, in one transaction.

        ``data[i]`` is ``records[i].data`` in canonical JSON (:func:`encode_append`).
        The outcome of each record is in ``result.outcomes``, in order.
        """
        result = AppendResult()
        shots = [{name: digest_of(img) for name, img in r.screenshots.items()} for r in records]
        with self._db.appending():
            db = self._db
            known = self._known({r.record_id for r in records})
            seq, prev, last_stored = self.head()
            stored_at = max(now, last_stored)
            rows: list[tuple[Any, ...]] = []
            images: list[bytes] = []
            for record, data_json, names in zip(records, data, shots, strict=True):
                shots_json = canonical(names) if names else b"{}"
                body = (record.source, record.kind, record.replay_id, record.at,
                        data_json.decode(), shots_json.decode())
                earlier = known.get(record.record_id)
                if earlier is not None:
                    same = earlier[1] == body
                    result.outcomes.append("duplicate" if same else "conflicting")
                    if not same:
                        conflict = self._conflict(record, body, earlier[0], seq + len(rows) + 1,
                                                  prev, stored_at)
                        rows.append(_row(conflict))
                        prev = conflict.hash
                    continue
                seq_of = seq + len(rows) + 1
                known[record.record_id] = (seq_of, body)
                digest = chain_hash(prev, content_bytes(
                    seq=seq_of, record_id=record.record_id, source=record.source,
                    kind=record.kind, replay_id=record.replay_id, at=record.at,
                    stored_at=stored_at, data=data_json, screenshots=shots_json))
                rows.append((seq_of, record.record_id, record.source, record.kind,
                             record.replay_id, record.at, stored_at, body[4], body[5], prev,
                             digest))
                prev = digest
                result.outcomes.append("stored")
                images.extend(record.screenshots.values())
            sizes = self.files.put_many(images) if images else {}
            if sizes and self.cipher.current not in self._keys_noted:
                db.execute("INSERT INTO image_keys (key_id, first_used_at) VALUES (?, ?) "
                           "ON CONFLICT (key_id) DO NOTHING", (self.cipher.current, stored_at))
            db.executemany(f"INSERT INTO records ({_COLUMNS}) VALUES "
                           "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            if sizes:
                db.executemany(
                    "INSERT INTO screenshots (sha256, size, last_seen_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (sha256) DO UPDATE SET last_seen_at = excluded.last_seen_at, "
                    "pruned_at = NULL, removed = 0",
                    [(d, size, stored_at) for d, size in sizes.items()])
        result.head_seq = seq + len(rows)
        if sizes and self.cipher.current is not None:
            self._keys_noted.add(self.cipher.current)  # (once committed)
            self.cipher.required.add(self.cipher.current)
        if rows:
            self._head = Anchor(result.head_seq, prev)
            self.flush_anchor(min_interval_s=ANCHOR_INTERVAL_S)
        return result

    def _known(self, ids: set[str]) -> dict[str, tuple[int, tuple[Any, ...]]]:
        """record_id → (seq, body) of those already stored."""
        found: dict[str, tuple[int, tuple[Any, ...]]] = {}
        wanted = sorted(ids)
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for seq, rid, *body in self._db.execute(
                    "SELECT seq, record_id, source, kind, replay_id, at, data, screenshots "
                    f"FROM records WHERE record_id IN ({marks})", chunk):
                found[rid] = (seq, tuple(body))
        return found

    def _conflict(self, record: AuditRecordIn, body: tuple[Any, ...], stored_seq: int,
                  seq: int, prev: str, stored_at: float) -> ChainRecord:
        """Our own record of a re-send whose content differs from the one stored."""
        return seal(prev, {
            "seq": seq, "record_id": f"{RESERVED_SOURCE}:conflict:{uuid.uuid4().hex}",
            "source": RESERVED_SOURCE, "kind": CONFLICT_KIND, "replay_id": record.replay_id,
            "at": stored_at, "stored_at": stored_at, "screenshots": {},
            "data": {"record_id": record.record_id, "stored_seq": stored_seq,
                     "claimed_source": record.source, "claimed_kind": record.kind,
                     "refused_content_sha256": digest_of(canonical(list(body)))}})

    def flush_anchor(self, min_interval_s: float = 0.0) -> None:
        """Write the head to the anchor file if it moved (and the last write is old enough).

        At most once a second on the hot path (written, fsync'ed, renamed, its directory
        fsync'ed: two fsyncs): after a crash or a power cut it may be behind the database
        (whose records it names are fsync'ed first), never ahead, never empty.
        """
        now = time.monotonic()
        if self._head == self._anchored or now - self._anchored_at < min_interval_s:
            return
        write_atomic(self.anchor_path, json.dumps(
            {"seq": self._head.seq, "hash": self._head.hash}).encode())
        self._anchored, self._anchored_at = self._head, now

    # Reading ------------------------------------------------------------------------------

    def page(self, *, after_seq: int, limit: int, replay_id: str | None = None,
             since: float | None = None, kind: str | None = None,
             max_bytes: int = MAX_PAGE_BYTES) -> tuple[list[ChainRecord], int | None]:
        """Records with seq > after_seq (of ``replay_id``, of ``kind``, stored at or after
        ``since``) and the ``after_seq`` of the next page, or None at the end."""
        where, args = ["seq > ?"], [after_seq]
        if replay_id is not None:
            where.append("replay_id = ?")
            args.append(replay_id)  # type: ignore[arg-type]
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)  # type: ignore[arg-type]
        if since is not None:
            where.append("stored_at >= ?")
            args.append(since)  # type: ignore[arg-type]
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM records WHERE {' AND '.join(where)} ORDER BY seq "
            "LIMIT ?", (*args, limit + 1)).fetchall()
        out: list[ChainRecord] = []
        size = 0
        for row in rows[:limit]:
            if out and size + len(row[7]) > max_bytes:
                break
            size += len(row[7])
            out.append(chain_record(row))
        more = len(out) < len(rows)
        return out, (out[-1].seq if out and more else None)

    def screenshot_state(self, digests: set[str]) -> dict[str, ScreenshotState]:
        """``stored``, ``pruned`` (by retention) or ``missing`` for each image."""
        pruned: set[str] = set()
        wanted = sorted(digests - self.files.present(digests))
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            pruned.update(d for (d,) in self._db.execute(
                "SELECT sha256 FROM screenshots WHERE pruned_at IS NOT NULL AND sha256 IN "
                f"({','.join('?' * len(chunk))})", chunk))
        return {d: "stored" if d not in wanted else "pruned" if d in pruned else "missing"
                for d in digests}

    # Retention ----------------------------------------------------------------------------

    def prune_screenshots(self, older_than_days: float, operator: str | None,
                          now: float, os_user: str | None = None) -> PruneResult:
        """Mark up to PRUNE_BATCH images last referenced before the cutoff as pruned and
        record it (one transaction), then delete their files (finished at the next start if
        interrupted). ``os_user``: the OS account that asked (proven by the people's door)."""
        cutoff = now - older_than_days * 86400.0
        last: ChainRecord | None = None
        with self._db.appending():
            db = self._db
            old = db.execute("SELECT sha256, size FROM screenshots WHERE pruned_at IS NULL "
                             "AND last_seen_at < ? LIMIT ?", (cutoff, PRUNE_BATCH)).fetchall()
            if old:
                db.executemany("UPDATE screenshots SET pruned_at = ? WHERE sha256 = ?",
                               [(now, d) for d, _size in old])
                last = self._own_record("prune", PRUNE_KIND, now, {
                    "older_than_days": older_than_days, "cutoff": cutoff, "images": len(old),
                    "bytes": sum(s for _d, s in old), "operator": operator,
                    **({"os_user": os_user} if os_user else {})})
        if last is not None:
            self._committed(last)
        removed, freed = self._finish_prunes()
        return PruneResult(removed, freed, cutoff, last.seq if last else None,
                           len(old) == PRUNE_BATCH)

    def record_key_rotation(self, previous: str | None, current: str, now: float) -> int:
        """Record that new images are sealed with ``current`` from now on; its seq."""
        with self._db.appending():
            record = self._own_record("key", KEY_ROTATED_KIND, now, {
                "previous_key_id": previous, "key_id": current})
        self._committed(record)
        return record.seq

    def _committed(self, record: ChainRecord) -> None:
        self._head = Anchor(record.seq, record.hash)
        self.flush_anchor()

    def _own_record(self, tag: str, kind: str, now: float, data: dict[str, Any]
                    ) -> ChainRecord:
        """Append a record of audit_log's own, inside the caller's ``appending`` block."""
        seq, prev, last_stored = self.head()
        stored_at = max(now, last_stored)
        record = seal(prev, {
            "seq": seq + 1, "record_id": f"{RESERVED_SOURCE}:{tag}:{uuid.uuid4().hex}",
            "source": RESERVED_SOURCE, "kind": kind, "replay_id": None, "at": now,
            "stored_at": stored_at, "screenshots": {}, "data": data})
        self._db.execute(f"INSERT INTO records ({_COLUMNS}) VALUES "
                         "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _row(record))
        return record

    def _finish_prunes(self) -> tuple[int, int]:
        """Delete the images marked pruned and not deleted yet: (images, bytes). Under the
        chain's lock: another writer (PostgreSQL) cannot reference one of them again
        between the choice and the deletion."""
        removed = freed = 0
        if self._db.execute("SELECT 1 FROM screenshots WHERE pruned_at IS NOT NULL AND "
                            "removed = 0 LIMIT 1").fetchone() is None:
            return 0, 0  # (the usual start: no lock taken)
        with self._db.appending():
            db = self._db
            digests = [d for (d,) in db.execute(
                "SELECT sha256 FROM screenshots WHERE pruned_at IS NOT NULL AND removed = 0")]
            for digest in digests:
                if self.files.exists(digest):
                    freed += self.files.remove(digest)
                    removed += 1
            db.executemany("UPDATE screenshots SET removed = 1 WHERE sha256 = ?",
                           [(d,) for d in digests])
        return removed, freed

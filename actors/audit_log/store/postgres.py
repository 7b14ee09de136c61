"""The audit trail on PostgreSQL (``LEA_DATABASE_URL``, psycopg 3): an
:class:`~actors.audit_log.store.db.AuditDb` that runs the SQL of audit_store.py, in the schema
``audit``.

The same guarantees as on SQLite (docs/durability.md, "The audit trail on PostgreSQL"):

- An append is one transaction and the session sets ``synchronous_commit = on``: the actor
  acknowledges once COMMIT has returned, its WAL flushed. A COMMIT the server turned into a
  ROLLBACK raises.
- A record is stored once: ``records.record_id`` is UNIQUE (and ``seq`` the primary key),
  so even a writer that skipped the checks could not store it twice nor fork the chain.
- Several writers (an audit_log on each server) make one chain: every write transaction
  first locks the one row of ``chain_lock`` (``SELECT ... FOR UPDATE``) and only then reads
  the head and the ids already stored; the next writer waits for that COMMIT and, at READ
  COMMITTED, its next statements see it.
- The screenshots are in the database (``images``, bytea), sealed with the image keyring
  (image_keys.py: every server of the trail holds the same keyring file), written in the
  append's own transaction: a server that dies takes no evidence with it (its disk held
  none).
- A writer that falls silent while it holds the lock (frozen, or its server cut off) loses
  it after :data:`IDLE_IN_TRANSACTION_S` (the server ends its session), and finds a server
  cut off from it within seconds (:data:`runtime.pg.KEEPALIVES`): the other server's
  appends are refused meanwhile (each waits :data:`LOCK_WAIT_S` at most, then its sender
  sends it again), not for TCP's hours.

A connection lost while in use is reported to ``on_lost`` (the actor stops; the record's
sender sends it again, stored once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import psycopg

from actors.audit_log.evidence import FileState
from actors.audit_log.image_keys import ImageCipher
from actors.audit_log.screenshots import content_state, digest_of
from runtime import pg

SCHEMA = "audit"
_LOCK = "lea.audit.schema"
IDLE_IN_TRANSACTION_S = 10
"""A writer's session that waits this long for its own next statement inside a transaction
is ended by the server, and the chain's lock with it: a writer frozen or cut off while it
held the lock (its server lost) holds up the other writers this long, not until TCP gives
up on it. An append waits on its client for milliseconds between statements."""
LOCK_WAIT_S = 1.5
"""How long a write transaction waits for the chain's lock before it is refused (the append
fails, its sender sends it again): the actor's loop, which beats its liveness beacon, is
never held longer (open.py makes it half of ``LEA_BEACON_TIMEOUT_S``)."""
# db.py's SQLite schema in PostgreSQL's types, plus the images and the chain's lock.
_TABLES = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
SET search_path = {SCHEMA};
CREATE TABLE IF NOT EXISTS records (
    seq BIGINT PRIMARY KEY, record_id TEXT NOT NULL UNIQUE, source TEXT NOT NULL,
    kind TEXT NOT NULL, replay_id TEXT, at DOUBLE PRECISION NOT NULL,
    stored_at DOUBLE PRECISION NOT NULL, data TEXT NOT NULL, screenshots TEXT NOT NULL,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS records_by_replay ON records (replay_id, seq);
CREATE INDEX IF NOT EXISTS records_by_stored_at ON records (stored_at);
CREATE TABLE IF NOT EXISTS screenshots (
    sha256 TEXT PRIMARY KEY, size BIGINT NOT NULL, last_seen_at DOUBLE PRECISION NOT NULL,
    pruned_at DOUBLE PRECISION, removed INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS screenshots_to_prune ON screenshots (last_seen_at)
    WHERE pruned_at IS NULL;
CREATE INDEX IF NOT EXISTS screenshots_to_remove ON screenshots (sha256)
    WHERE pruned_at IS NOT NULL AND removed = 0;
CREATE TABLE IF NOT EXISTS images (sha256 TEXT PRIMARY KEY, data BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS image_keys (
    key_id TEXT PRIMARY KEY, first_used_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS chain_lock (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one));
INSERT INTO chain_lock VALUES (TRUE) ON CONFLICT DO NOTHING;
"""


class PgAuditDb:
    """The trail in one session (:class:`runtime.pg.Session`)."""

    anchor_name = "head.pg.json"

    def __init__(self, session: pg.Session, where: str, cipher: ImageCipher) -> None:
        self.session, self.where = session, where
        self.execute = session.execute
        self.executemany = session.executemany
        self.images = PgImages(self, cipher)

    @classmethod
    def connect(cls, url: str, cipher: ImageCipher, on_lost: pg.OnLost | None = None,
                wait_s: float = pg.CONNECT_WAIT_S,
                waiting: Callable[[], None] = lambda: None,
                lock_wait_s: float = LOCK_WAIT_S) -> PgAuditDb:
        """The trail at ``url``, its tables created if absent (the actor's); raises
        :class:`runtime.pg.DatabaseUnavailable` if the server cannot be reached."""
        conn = pg.connect(url, wait_s, waiting)
        try:
            conn.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_S}s'"
                         .encode())
            conn.execute(f"SET lock_timeout = '{max(1, round(lock_wait_s * 1000))}ms'".encode())
            pg.set_up(conn, _LOCK, _TABLES)
        except psycopg.Error as exc:  # e.g. no right to create the schema: said, not a trace
            conn.close()
            raise pg.DatabaseUnavailable(
                f"PostgreSQL at {pg.describe(url)}: cannot set up the audit trail's tables: "
                f"{str(exc).strip()}") from None
        return cls(pg.Session(conn, on_lost), pg.describe(url), cipher)

    @classmethod
    def open_readonly(cls, url: str, cipher: ImageCipher | None = None) -> PgAuditDb:
        """The trail at ``url`` for reading only (``audit verify``): creates nothing;
        FileNotFoundError if the database holds no trail."""
        conn = pg.connect(url, wait_s=0.0)
        try:
            conn.execute("SET default_transaction_read_only = on")
            found = conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.records",)).fetchone()
            if found is None or found[0] is None:
                raise FileNotFoundError(f"no audit trail (schema {SCHEMA}) in PostgreSQL at "
                                        f"{pg.describe(url)}")
            conn.execute(f"SET search_path = {SCHEMA}".encode())
        except BaseException:
            conn.close()
            raise
        # Without a keyring, the images are only counted (their content is "locked").
        return cls(pg.Session(conn), pg.describe(url), cipher or ImageCipher(None))

    @contextmanager
    def appending(self) -> Iterator[None]:
        self.execute("BEGIN")
        try:
            # The chain's lock, held to the COMMIT: whoever appends next waits here, then
            # reads the head this transaction wrote.
            self.execute("SELECT one FROM chain_lock FOR UPDATE")
            yield
        except BaseException:
            self.session.rollback()
            raise
        self.session.commit()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        self.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield
        finally:
            self.session.rollback()

    def close(self) -> None:
        self.session.close()


class PgImages:
    """The screenshots in the table ``images``, sealed with ``cipher``, written in the
    caller's transaction."""

    def __init__(self, db: PgAuditDb, cipher: ImageCipher) -> None:
        self._db, self.cipher = db, cipher

    def put_many(self, images: Iterable[bytes]) -> dict[str, int]:
        stored: dict[str, bytes] = {}
        for image in images:
            stored.setdefault(digest_of(image), image)
        # Every image sealed before any is written (KeyUnavailable: none is).
        sealed = [(d, self.cipher.seal(d, image)) for d, image in stored.items()]
        self._db.executemany("INSERT INTO images (sha256, data) VALUES (?, ?) "
                             "ON CONFLICT (sha256) DO NOTHING", sealed)
        return {digest: len(image) for digest, image in stored.items()}

    def exists(self, digest: str) -> bool:
        return self._db.execute("SELECT 1 FROM images WHERE sha256 = ?",
                                (digest,)).fetchone() is not None

    def present(self, digests: set[str]) -> set[str]:
        if not digests:
            return set()
        return {d for (d,) in self._db.execute("SELECT sha256 FROM images WHERE sha256 = "
                                               "ANY(?)", (sorted(digests),))}

    def read(self, digest: str) -> bytes:
        row = self._db.execute("SELECT data FROM images WHERE sha256 = ?", (digest,)).fetchone()
        if row is None:
            raise FileNotFoundError(f"no image {digest} in the database")
        return self.cipher.open(digest, bytes(row[0]))

    def remove(self, digest: str) -> int:
        row = self._db.execute("DELETE FROM images WHERE sha256 = ? RETURNING length(data)",
                               (digest,)).fetchone()
        return int(row[0]) if row is not None else 0

    def state(self, digest: str, check_content: bool = True) -> FileState:
        if not check_content:
            return "ok" if self.exists(digest) else "missing"
        row = self._db.execute("SELECT data FROM images WHERE sha256 = ?", (digest,)).fetchone()
        return "missing" if row is None else content_state(self.cipher, digest, bytes(row[0]))

    def digests(self) -> Iterable[str]:
        return [d for (d,) in self._db.execute("SELECT sha256 FROM images")]

    def close(self) -> None:
        pass

"""What the audit store (audit_store.py) needs of its database and of where its images go.

:class:`~actors.audit_log.store.audit_store.AuditStore` holds the SQL (written once, with ``?``
marks); an :class:`AuditDb` runs it: SQLite in the data directory (:class:`SqliteAuditDb`, the
embedded default, images as files beside it) or PostgreSQL (postgres.py, with
``LEA_DATABASE_URL``: images in the database). Both keep the same tables and the same
guarantees (docs/durability.md, "The audit trail on PostgreSQL").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from actors.audit_log.evidence import FileState
from actors.audit_log.image_keys import ImageCipher
from actors.audit_log.screenshots import ScreenshotFiles
from runtime import sqlite_store
from runtime.durability import fsync_dir
from runtime.store_db import Database, Rows


class Reader(Protocol):
    """Enough to read the chain (:func:`~actors.audit_log.store.audit_store.iter_chain`)."""

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows: ...


class Images(Protocol):
    """The screenshots, content-addressed by the sha256 (hex) of their plaintext, stored
    sealed with ``cipher`` (image_keys.py)."""

    cipher: ImageCipher

    def put_many(self, images: Iterable[bytes]) -> dict[str, int]:
        """Store each image durably, within the append's transaction or before its commit;
        digest → size of each."""

    def exists(self, digest: str) -> bool: ...

    def present(self, digests: set[str]) -> set[str]:
        """Those of ``digests`` that are stored."""

    def read(self, digest: str) -> bytes:
        """The image; FileNotFoundError if it is not there; KeyUnavailable or
        ImageUndecryptable (image_seal.py) if it does not open."""

    def remove(self, digest: str) -> int:
        """Delete an image; the bytes freed (0 if it was not there)."""

    def state(self, digest: str, check_content: bool = True) -> FileState: ...

    def digests(self) -> Iterable[str]: ...

    def close(self) -> None: ...


class AuditDb(Reader, Database, Protocol):
    """One connection, used from one thread."""

    where: str
    """For messages: the file, or ``host:port/dbname``."""
    anchor_name: str
    """The head anchor's file name in ``<data_dir>/audit/`` (one per kind of database: the
    head of one trail is no anchor for another)."""

    @property
    def images(self) -> Images: ...

    def appending(self) -> AbstractContextManager[None]:
        """A write transaction holding the chain's lock from its start: the head read in it
        is the head, whoever else appends (all or nothing; durable once the block ends)."""

    def snapshot(self) -> AbstractContextManager[None]:
        """A read-only transaction that sees one consistent state of the trail."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY, record_id TEXT NOT NULL UNIQUE, source TEXT NOT NULL,
    kind TEXT NOT NULL, replay_id TEXT, at REAL NOT NULL, stored_at REAL NOT NULL,
    data TEXT NOT NULL, screenshots TEXT NOT NULL, prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS records_by_replay ON records (replay_id, seq);
CREATE INDEX IF NOT EXISTS records_by_stored_at ON records (stored_at);
-- Not part of the chain: where each image is, for retention (the chain has the hashes).
-- pruned_at: marked by retention (with its record); removed: its file is deleted.
CREATE TABLE IF NOT EXISTS screenshots (
    sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, last_seen_at REAL NOT NULL,
    pruned_at REAL, removed INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS screenshots_to_prune ON screenshots (last_seen_at)
    WHERE pruned_at IS NULL;
CREATE INDEX IF NOT EXISTS screenshots_to_remove ON screenshots (sha256)
    WHERE pruned_at IS NOT NULL AND removed = 0;
-- The image keys images were sealed with (image_keys.py), from their first use: a trail
-- that has one needs its keyring (never made anew in its place).
CREATE TABLE IF NOT EXISTS image_keys (key_id TEXT PRIMARY KEY, first_used_at REAL NOT NULL);
"""
DB_NAME = "audit.db"


def _create(db: sqlite3.Connection) -> None:
    db.executescript(_SCHEMA)  # idempotent: IF NOT EXISTS


def default_keyring(data_dir: Path) -> Path:
    """The image keyring when ``LEA_IMAGE_KEYRING`` is not set: beside the CURVE keys, not
    with the images (docs/operations.md advises a place outside the data directory)."""
    return data_dir / "keys" / "image-keys.json"


def audit_paths(data_dir: Path) -> tuple[Path, Path, Path]:
    """(database, screenshots root, head anchor file) under ``data_dir`` (SQLite)."""
    return (data_dir / DB_NAME, data_dir / "audit" / "screenshots",
            data_dir / "audit" / "head.json")


class SqliteAuditDb:
    """``<data_dir>/audit.db`` (WAL, ``synchronous=FULL``: COMMIT returns once the WAL is
    fsync'ed) and the image files under ``<data_dir>/audit/screenshots``, written and
    fsync'ed before the commit that references them."""

    anchor_name = "head.json"

    def __init__(self, conn: sqlite3.Connection, images: ScreenshotFiles, where: Path) -> None:
        self.conn, self.images, self.where = conn, images, str(where)

    @classmethod
    def open(cls, data_dir: Path, cipher: ImageCipher | None = None) -> SqliteAuditDb:
        """The trail in ``data_dir``, created if absent (the actor's); its images sealed with
        ``cipher`` (default: the keyring at :func:`default_keyring`, loaded by the store)."""
        path, shots_root, anchor = audit_paths(data_dir)
        shots_root.mkdir(parents=True, exist_ok=True)
        for directory in (data_dir, anchor.parent):  # their new names, durable
            fsync_dir(directory)
        files = ScreenshotFiles(shots_root, cipher or ImageCipher(default_keyring(data_dir)))
        files.remove_leftovers()
        # The checkpoint: a predecessor killed between a commit's write and its fsync left
        # records that a re-send would now be told are stored; it fsyncs them first (power
        # cuts, docs/durability.md).
        return cls(sqlite_store.connect(path, synchronous="FULL", busy_timeout_s=10.0,
                                        setup=_create, checkpoint=True), files, path)

    @classmethod
    def open_readonly(cls, data_dir: Path, cipher: ImageCipher | None = None) -> SqliteAuditDb:
        """The trail in ``data_dir`` for reading only (``audit verify``: it writes nothing);
        FileNotFoundError if there is none."""
        path, shots_root, _anchor = audit_paths(data_dir)
        if not path.is_file():
            raise FileNotFoundError(path)
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        if cipher is None:
            cipher = ImageCipher(default_keyring(data_dir))
            cipher.load()  # never made here: a reader writes nothing
        return cls(conn, ScreenshotFiles(shots_root, cipher), path)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        return self.conn.execute(sql, args)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    @contextmanager
    def appending(self) -> Iterator[None]:
        # BEGIN IMMEDIATE: the write lock from the start, so even two writers on one file
        # could not fork the chain.
        with sqlite_store.transaction(self.conn):
            yield

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            sqlite_store.rollback(self.conn)

    def close(self) -> None:
        try:
            self.images.close()
        finally:
            self.conn.close()

"""One way to open and write the project's SQLite databases (docs/durability.md).

Every store (the dispatcher's, audit_log's, the agent's ledger, the audit outboxes, the
console's accounts) is one file that one process writes from one connection:

- :func:`connect`: WAL journal, the store's ``synchronous`` level, its busy timeout, its
  schema set up; a file made by this open has its name made durable (the directory is
  fsync'ed, where the OS has that, :func:`runtime.durability.fsync_dir`).
- :func:`transaction` (or :func:`begin` / :func:`commit` / :func:`rollback` for a
  transaction that spans calls, the dispatcher's turn): ``BEGIN IMMEDIATE``, so the write
  lock is taken at the start and a transaction never fails half-way for want of it; all or
  nothing.
- :func:`start_epoch`: outbox ids that no rollback can hand out twice. Each open of a
  database commits (fsync'ed) a new epoch, and the outbox's AUTOINCREMENT goes on from
  ``epoch << 32``: a row id given out after a cut is above any given out before it, even if
  the cut rolled those rows back.

The agent's ledger uses it on Windows too: nothing here is POSIX-only.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from runtime.durability import fsync_dir

Synchronous = Literal["FULL", "NORMAL", "OFF"]
"""SQLite's ``synchronous`` level in WAL mode: FULL fsyncs the WAL at every COMMIT (a
committed row survives a power cut); NORMAL only at checkpoints (it survives kill -9, not a
cut); OFF never."""

EPOCH_BITS = 32
"""Row ids an epoch may use: 2**32 (a dispatcher making 1,000 a second for 49 days)."""


def _nothing(db: sqlite3.Connection) -> None:
    pass


def connect(path: Path, *, synchronous: Synchronous,
            setup: Callable[[sqlite3.Connection], None] = _nothing,
            busy_timeout_s: float = 5.0, checkpoint: bool = False, owner_only: bool = False,
            threads: bool = False) -> sqlite3.Connection:
    """Open (creating it and its folder if need be) the database at ``path``.

    ``setup(db)`` runs once the journal and sync level are set (the schema, a check of its
    version); a failure closes the connection and raises. ``checkpoint``: then checkpoint
    the WAL (``wal_checkpoint(FULL)``, which fsyncs it), for a store about to act on rows
    that a predecessor killed between a commit's write and its fsync left unsynced (a store
    whose ``setup`` commits with FULL needs none: that fsync hardens them too).
    ``owner_only``: a new file is made readable by its owner only (0600), from the start.
    ``threads``: the connection may be used from several threads (under the caller's lock).
    Autocommit mode: a statement outside :func:`transaction` is its own transaction.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    if owner_only:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                         check_same_thread=not threads)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        setup(db)
        if checkpoint:
            db.execute("PRAGMA wal_checkpoint(FULL)")
    except BaseException:
        db.close()
        raise
    if created:
        fsync_dir(path.parent)  # the new file's name must survive a cut too
    return db


def begin(db: sqlite3.Connection) -> None:
    """Begin a write transaction, holding the write lock from now on (waiting for it up to
    the busy timeout): the transaction's later statements never find it taken."""
    db.execute("BEGIN IMMEDIATE")


def commit(db: sqlite3.Connection) -> None:
    """Commit (durable on return with ``synchronous=FULL``); a failed commit is rolled back
    and raises: nothing of it is applied."""
    try:
        db.execute("COMMIT")
    except BaseException:
        rollback(db)
        raise


def rollback(db: sqlite3.Connection) -> None:
    """Forget the open transaction, if any (SQLite may have rolled it back itself on an
    I/O error: a second ROLLBACK would hide that error behind its own)."""
    if db.in_transaction:
        db.execute("ROLLBACK")


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``with transaction(db):`` the block's writes, all or nothing (rolled back if it
    raises, committed at its end)."""
    begin(db)
    try:
        yield db
    except BaseException:
        rollback(db)
        raise
    commit(db)


def start_epoch(db: sqlite3.Connection, table: str) -> int:
    """Begin a new epoch of ``table``'s AUTOINCREMENT ids (committed before return, so it
    must be called outside a transaction, on a ``synchronous=FULL`` connection); returns it.
    """
    with transaction(db):
        row = db.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
        epoch = (int(row[0]) if row else 0) + 1
        db.execute("INSERT OR REPLACE INTO meta VALUES ('epoch', ?)", (str(epoch),))
        floor = epoch << EPOCH_BITS
        # sqlite_sequence holds the AUTOINCREMENT high-water mark (a row only once the table
        # had an insert): ids go on above it.
        updated = db.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?",
                             (floor, table)).rowcount
        if not updated:
            db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, floor))
    return epoch

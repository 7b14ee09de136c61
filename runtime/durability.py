"""What survives a power cut, for the files and databases the server writes (docs/durability.md).

- :func:`write_atomic`: a small file replaced whole (the audit head anchor, keys): written to a
  temporary name, fsync'ed, renamed into place, and its directory fsync'ed. After a cut the
  file is the old one or the new one, never empty or half-written.
- :func:`start_epoch`: outbox ids that no rollback can hand out twice. Each open of a database
  commits (fsync'ed) a new epoch, and the outbox's AUTOINCREMENT goes on from
  ``epoch << 32``: a row id given out after a cut is above any given out before it, even if
  the cut rolled those rows back.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

EPOCH_BITS = 32
"""Row ids an epoch may use: 2**32 (a dispatcher making 1,000 a second for 49 days)."""


def fsync_dir(path: Path) -> None:
    """Make the names in directory ``path`` (created, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Make ``path``'s content durable (its name needs :func:`fsync_dir` of its directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes, tmp: Path) -> None:
    """Write ``data`` to ``tmp``, fsync it, rename it to ``path``; the caller fsyncs the
    directory (once for many files)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a cut leaves the old or the new content."""
    write_synced(path, data, path.with_name(f".{path.name}.tmp-{os.getpid()}"))
    fsync_dir(path.parent)


def start_epoch(db: sqlite3.Connection, table: str) -> int:
    """Begin a new epoch of ``table``'s AUTOINCREMENT ids (committed before return, so it
    must be called outside a transaction, on a ``synchronous=FULL`` connection); returns it.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
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
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return epoch

"""Checkpoints the dispatcher's WAL off its loop: a thread with its own connection.

Every commit of the dispatcher is fsync'ed (a group commit, docs/durability.md), so this
thread is not about durability: it keeps the WAL short by copying it into the database file
(a checkpoint, which SQLite does with two fsyncs) on a thread of its own (sqlite3 releases
the GIL while SQLite works), rather than on the loop's connection at some commit.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from loguru import logger

SYNC_INTERVAL_S = 1.0
"""Checkpoints are not on any path that waits; each costs two fsyncs that compete with the
loop's own commit on the disk, so not too often."""


class WalSyncer:
    """Checkpoints ``path`` every ``interval_s`` while commits were made since the last."""

    def __init__(self, path: Path, interval_s: float = SYNC_INTERVAL_S) -> None:
        self.path = path
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._committed = 0  # commits made by the loop
        self._copied = 0  # of those, how many a checkpoint has copied into the file
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wal-syncer", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """The loop made a commit."""
        with self._lock:
            self._committed += 1

    def behind(self) -> int:
        """Commits not yet copied into the database file."""
        with self._lock:
            return self._committed - self._copied

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error:
            logger.exception("wal syncer: cannot open {}; SQLite checkpoints on the loop",
                             self.path)
            return
        try:
            db.execute("PRAGMA synchronous=NORMAL")  # a checkpoint fsyncs; nothing else here
            while not self._stop.wait(self.interval_s):
                self.sync(db)
        finally:
            db.close()

    def sync(self, db: sqlite3.Connection) -> bool:
        """One checkpoint if commits wait; True if they are all in the database file now."""
        with self._lock:
            target = self._committed
            if target <= self._copied:
                return True
        try:
            busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            logger.warning("wal syncer: checkpoint failed: {}", exc)
            return False
        if busy or copied != frames:
            return False  # another checkpoint ran, or frames were held back: next time
        with self._lock:
            self._copied = max(self._copied, target)
        return True

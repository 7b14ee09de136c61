"""Hardens the dispatcher's non-durable commits off its loop: a thread checkpointing the WAL.

A checkpoint fsyncs the WAL before it copies it into the database file, then fsyncs that file
(SQLite does so at ``synchronous`` NORMAL or FULL on the connection that checkpoints). So once
a checkpoint has copied every frame there was when it started, every commit made before it
started is on disk. Done here, in a thread with its own connection (sqlite3 releases the GIL
while SQLite works), those fsyncs no longer stall the dispatcher's loop: it only counts its
commits (:meth:`WalSyncer.committed`) and makes a commit durable itself when this thread
falls behind (see store.py).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from loguru import logger

SYNC_INTERVAL_S = 0.05


class WalSyncer:
    """Checkpoints ``path`` every ``interval_s`` while there are commits not known on disk."""

    def __init__(self, path: Path, interval_s: float = SYNC_INTERVAL_S) -> None:
        self.path = path
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._committed = 0  # commits made by the loop
        self._synced = 0  # of those, how many are known to be on disk
        self._synced_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wal-syncer", daemon=True)
        self._thread.start()

    def committed(self, durable: bool) -> None:
        """The loop made a commit; a durable one (fsync'ed) hardened every earlier one too."""
        with self._lock:
            self._committed += 1
            if durable:
                self._synced, self._synced_at = self._committed, time.monotonic()

    def unsynced(self) -> tuple[int, float]:
        """(commits not known on disk, seconds since the last time all were)."""
        with self._lock:
            return self._committed - self._synced, time.monotonic() - self._synced_at

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error:
            logger.exception("wal syncer: cannot open {}; the loop will fsync itself", self.path)
            return
        try:
            db.execute("PRAGMA synchronous=NORMAL")  # a checkpoint fsyncs; nothing else here
            while not self._stop.wait(self.interval_s):
                self.sync(db)
        finally:
            db.close()

    def sync(self, db: sqlite3.Connection) -> bool:
        """One checkpoint if commits wait; True if they are all on disk now."""
        with self._lock:
            target = self._committed
            if target <= self._synced:
                return True
        try:
            busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            logger.warning("wal syncer: checkpoint failed: {}", exc)
            return False
        if busy or copied != frames:
            return False  # another checkpoint ran, or frames were held back: next time
        with self._lock:
            if target > self._synced:
                self._synced, self._synced_at = target, time.monotonic()
        return True

"""The dispatcher's store on SQLite, the embedded default: a file in the data directory, its
tables, and the :class:`~actors.dispatcher.store.db.StoreDb` that runs the store's SQL on it
(WAL, ``synchronous=FULL``, outbox epochs; docs/durability.md). PostgreSQL: postgres.py.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from actors.dispatcher.store import queue_rows as queue_store
from actors.dispatcher.store.wal_syncer import SYNC_INTERVAL_S, WalSyncer
from runtime import sqlite_store
from runtime.store_db import Rows

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS replays (
    replay_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, session_id TEXT NOT NULL,
    machine_id TEXT NOT NULL, mode TEXT NOT NULL, operator TEXT, created_at REAL NOT NULL,
    workflow BLOB NOT NULL, status TEXT NOT NULL, state BLOB NOT NULL,
    updated_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS replays_by_status ON replays (status, seq);
CREATE TABLE IF NOT EXISTS resolved (
    replay_id TEXT NOT NULL, action_id TEXT NOT NULL, outcome TEXT NOT NULL,
    attempt_id TEXT NOT NULL, PRIMARY KEY (replay_id, action_id));
-- AUTOINCREMENT: an outbox id is never reused, so receivers can dedupe on it.
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY AUTOINCREMENT, received_at REAL NOT NULL,
    replay_id TEXT NOT NULL, action_id TEXT NOT NULL, attempt_id TEXT NOT NULL,
    sender_machine TEXT NOT NULL, status TEXT NOT NULL, success INTEGER NOT NULL,
    error TEXT, warning TEXT, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS reports_by_action ON reports (replay_id, action_id);
-- Control requests applied, by envelope id, with the reply sent: a copy of one (a Lazy
-- Pirate retry, or a copy the broker queued while we were down) gets that reply again.
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, kind TEXT NOT NULL,
    reply BLOB NOT NULL, UNIQUE (request_id, kind));
"""
WAL_AUTOCHECKPOINT = 10_000
"""Pages (4 KiB) before the loop's own connection checkpoints: the syncer does it before."""


def _create(db: sqlite3.Connection) -> None:
    db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT}")
    db.executescript(_SCHEMA + queue_store.SCHEMA)
    db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
               (str(SCHEMA_VERSION),))
    # Names this database in the ids of what it sends (audit record ids): a database made
    # anew restarts its outbox ids, never its store id.
    db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))


class SqliteDb:
    """The store's :class:`StoreDb` on SQLite: WAL, ``synchronous=FULL``, outbox epochs, the
    WAL checkpointed off the loop (wal_syncer.py)."""

    versioned = False
    pipelined = False

    def __init__(self, path: Path, sync_interval_s: float = SYNC_INTERVAL_S) -> None:
        # FULL: every COMMIT fsyncs the WAL, which hardens every earlier commit too (one
        # file): a turn's decisions are committed together (stage, harden).
        self.db = sqlite_store.connect(path, synchronous="FULL", setup=_create)
        # A FULL commit: it also hardens whatever a killed predecessor committed without
        # its fsync finishing (we are about to read it and send it on).
        self.epoch = sqlite_store.start_epoch(self.db, "outbox")
        self.syncer = WalSyncer(path, sync_interval_s)

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        return self.db.execute(sql, args)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:  # no rows: not even the statement's preparation (most turns write no queue)
            self.db.executemany(sql, rows)

    def begin(self) -> None:
        sqlite_store.begin(self.db)

    def commit(self) -> None:
        sqlite_store.commit(self.db)
        self.syncer.committed()

    def rollback(self) -> None:
        sqlite_store.rollback(self.db)

    def close(self) -> None:
        self.syncer.close()
        sqlite_store.rollback(self.db)
        self.db.close()

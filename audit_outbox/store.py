"""The supervisor's audit outbox: ``<data_dir>/supervisor.sqlite3`` (docs/architecture.md).

Each start, exit and restart of a child is an audit record. audit_log is itself one of the
children (and the broker another), so a record cannot wait for it: it is committed here first
(WAL, ``synchronous=FULL``: it survives kill -9 of the supervisor and a power cut), and a row
is deleted only once audit_log has acknowledged it as durable (audit_outbox/audit_link.py).
Rows left by a previous run are sent at the next start. Record ids are
``{source}:{store id}:{row id}``; the store id is made once per database, AUTOINCREMENT
never reuses a row id, and each open starts a new epoch of ids (runtime/sqlite_store.py), so
an id names one record forever, even after a cut that rolled back the last rows.

No actor reads this database (docs/architecture.md): it is the supervisor's own. The broker, a child
that cannot wait for audit_log either, commits its refusals here too (source ``broker``,
broker/refusal_audit.py); the supervisor sends them with its own. The console keeps the same
outbox in its own database (console/account_store.py), beside its accounts.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from messages.audit import DATA_VIEWED, MAX_REPLAY_ID, AuditRecordIn
from runtime import sqlite_store

DB_NAME = "supervisor.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, kind TEXT NOT NULL,
    at REAL NOT NULL, data TEXT NOT NULL);
"""


def create(db: sqlite3.Connection) -> None:
    """The outbox's tables in ``db`` (another owner may keep its own tables beside them and
    commit a record in the same transaction as the change it records), and a new epoch of
    its ids (outside any transaction: no id is reused after a cut, runtime/sqlite_store.py)."""
    db.executescript(_SCHEMA)
    db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (uuid.uuid4().hex,))
    sqlite_store.start_epoch(db, "outbox")


def insert(db: sqlite3.Connection, source: str, kind: str, at: float,
           data: dict[str, Any]) -> int:
    """Add one record to the outbox of ``db`` (in the caller's transaction, if any); its row
    id. ``data`` must be JSON (ValueError/TypeError)."""
    text = json.dumps(data, sort_keys=True, allow_nan=False)
    cursor = db.execute("INSERT INTO outbox (source, kind, at, data) VALUES (?, ?, ?, ?)",
                        (source, kind, at, text))
    row = cursor.lastrowid
    assert row is not None
    return row


def _record(record_id: str, source: str, kind: str, at: float,
            data: dict[str, Any]) -> AuditRecordIn:
    """A row as a record; one whose data names a replay is filed under it (the console's
    refusal of a viewer's resume is part of that replay's story). A view of its data is not:
    it is listed by ``audit access`` (docs/operations.md, "Who saw what")."""
    replay_id = data.get("replay_id")
    if (not isinstance(replay_id, str) or not 1 <= len(replay_id) <= MAX_REPLAY_ID
            or kind == DATA_VIEWED):
        replay_id = None
    return AuditRecordIn(record_id=record_id, source=source, kind=kind, replay_id=replay_id,
                         at=at, data=data)


class AuditOutbox:
    """Audit records not yet acknowledged by audit_log; one instance, one thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = sqlite_store.connect(self.path, synchronous="FULL", setup=create)
        (self.store_id,) = self._db.execute(
            "SELECT value FROM meta WHERE key = 'store_id'").fetchone()

    @classmethod
    def in_dir(cls, data_dir: str | Path) -> AuditOutbox:
        return cls(Path(data_dir) / DB_NAME)

    def close(self) -> None:
        self._db.close()

    def add(self, source: str, kind: str, at: float, data: dict[str, Any]) -> int:
        """Commit one record; its row id. ``data`` must be JSON (ValueError/TypeError)."""
        return insert(self._db, source, kind, at, data)

    def pending(self, after: int, limit: int) -> list[tuple[int, AuditRecordIn]]:
        """Rows with an id above ``after``, oldest first, as audit records."""
        rows = self._db.execute(
            "SELECT id, source, kind, at, data FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
            (after, limit)).fetchall()
        return [(row, _record(f"{source}:{self.store_id}:{row}", source, kind, at,
                              json.loads(data))) for row, source, kind, at, data in rows]

    def remove(self, ids: Iterable[int]) -> None:
        """Forget rows audit_log has acknowledged (a crash before this only re-sends them,
        which audit_log stores once)."""
        with sqlite_store.transaction(self._db) as db:
            db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])

    def count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM outbox").fetchone()[0])

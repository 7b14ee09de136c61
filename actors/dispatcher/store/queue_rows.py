"""Work queues and items in the dispatcher's database (docs/queues.md): their tables and SQL,
run by dispatcher_store.py's :class:`~actors.dispatcher.store.dispatcher_store.DispatcherStore` in
the turn's transaction, on SQLite or PostgreSQL (postgres.py keeps the same tables in its types).

A reference is unique within its queue whatever its item's state: the primary key says so,
not a check before the insert. An item is one row: its state beside the whole item packed
(msgpack), rewritten at each change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from actors.dispatcher.machine.queue_book import QueueDef, QueueItem
from actors.dispatcher.store.db import StoreDb
from messages.workflow import Workflow

SCHEMA = """
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY, pool TEXT NOT NULL, max_attempts INTEGER NOT NULL,
    created_at REAL NOT NULL, workflow BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS queue_items (
    queue TEXT NOT NULL, reference TEXT NOT NULL, seq INTEGER NOT NULL, state TEXT NOT NULL,
    body BLOB NOT NULL, PRIMARY KEY (queue, reference));
CREATE INDEX IF NOT EXISTS queue_items_by_state ON queue_items (queue, state, seq);
"""


def _pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def write(db: StoreDb, queues: Sequence[QueueDef], new_items: Sequence[QueueItem],
          items: Sequence[QueueItem]) -> None:
    """Queues created, items added (a plain INSERT: a second item of one reference fails
    the transaction) and items changed."""
    db.executemany(
        "INSERT INTO queues (name, pool, max_attempts, created_at, workflow) "
        "VALUES (?, ?, ?, ?, ?)",
        [(q.name, q.pool, q.max_attempts, q.created_at,
          _pack(q.workflow.model_dump(mode="json"))) for q in queues])
    db.executemany(
        "INSERT INTO queue_items (queue, reference, seq, state, body) VALUES (?, ?, ?, ?, ?)",
        [(i.queue, i.reference, i.seq, i.state, _pack(i.dump())) for i in new_items])
    db.executemany(
        "UPDATE queue_items SET state = ?, body = ? WHERE queue = ? AND reference = ?",
        [(i.state, _pack(i.dump()), i.queue, i.reference) for i in items])


def load(db: StoreDb) -> tuple[list[QueueDef], list[QueueItem]]:
    """Every queue and every item, oldest first."""
    queues = [QueueDef(name=name, pool=pool, max_attempts=int(attempts),
                       created_at=float(created),
                       workflow=Workflow.model_validate(msgpack.unpackb(workflow, raw=False)))
              for name, pool, attempts, created, workflow in db.execute(
                  "SELECT name, pool, max_attempts, created_at, workflow FROM queues")]
    items = [QueueItem.load(msgpack.unpackb(body, raw=False)) for (body,) in db.execute(
        "SELECT body FROM queue_items ORDER BY seq")]
    return queues, items

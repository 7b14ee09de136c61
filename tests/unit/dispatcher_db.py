"""The dispatcher's store on either database, for the tests of its contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from actors.dispatcher.store.dispatcher_store import DispatcherStore
from actors.dispatcher.store.postgres import PgDb


def open_at(where: str, **kwargs: Any) -> DispatcherStore:
    """The store at ``where``: a PostgreSQL URL or a SQLite file."""
    if where.startswith("postgresql://"):
        return DispatcherStore(PgDb.connect(where), **kwargs)
    return DispatcherStore(where, **kwargs)


class Reopen:
    """Opens the test's one database again (each call a new store, as after a restart)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __call__(self, **kwargs: Any) -> DispatcherStore:
        return open_at(self.where, **kwargs)

    def count(self, sql: str, *args: Any) -> int:
        """``SELECT count(*) ...`` from another connection: what is committed only."""
        if self.where.startswith("postgresql://"):
            with psycopg.connect(self.where, options="-c search_path=dispatcher") as conn:
                row = conn.execute(sql.replace("?", "%s").encode(), args).fetchone()
        else:
            import sqlite3
            from contextlib import closing

            with closing(sqlite3.connect(Path(self.where))) as db:
                row = db.execute(sql, args).fetchone()
        assert row is not None
        return int(row[0])

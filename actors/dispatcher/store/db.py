"""What the dispatcher's store (dispatcher_store.py) needs of its database, whichever it is:
a :class:`runtime.store_db.Database` that also runs the turn's transaction.

:class:`~actors.dispatcher.store.dispatcher_store.DispatcherStore` holds the SQL (written
once, with ``?`` marks) and the group commit; a :class:`StoreDb` runs it: SQLite in the data
directory (dispatcher_store.py, the embedded default) or PostgreSQL (postgres.py,
``LEA_DATABASE_URL``). Both keep the same tables (docs/durability.md, "The dispatcher's
database on PostgreSQL").
"""

from __future__ import annotations

from typing import Protocol

from runtime.store_db import Database


class StoreDb(Database, Protocol):
    """One connection, used from one thread; one write transaction at a time."""

    versioned: bool
    """``replays`` has a ``version`` column, bumped by every write of a replay (PostgreSQL:
    dispatchers sharing a database serialise a replay's decisions on it)."""

    pipelined: bool
    """A turn's statements go out without waiting for their results, which come with the
    commit's (PostgreSQL's pipeline mode): a turn reads a result only after :meth:`commit`."""

    @property
    def in_transaction(self) -> bool: ...

    def begin(self) -> None:
        """Open the turn's write transaction."""

    def commit(self) -> None:
        """Commit it, durable on return; raises (rolled back) if it is not."""

    def rollback(self) -> None:
        """Forget the open transaction, if any; never hides the error that led here."""


class StoreUnavailable(Exception):
    """The database cannot be reached at open (postgres.py): the dispatcher says so and
    exits, and the supervisor's restart policy applies (docs/operations.md)."""

"""What the dispatcher's store (store.py) needs of its database, whichever it is.

:class:`actors.dispatcher.store.DispatcherStore` holds the SQL (written once, with ``?``
marks) and the group commit; a :class:`StoreDb` runs it: SQLite in the data directory
(store.py, the embedded default) or PostgreSQL (pg_store.py, ``LEA_DATABASE_URL``). Both
keep the same tables (docs/durability.md, "The dispatcher's database on PostgreSQL").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol


class Rows(Protocol):
    """The rows of one statement."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class StoreDb(Protocol):
    """One connection, used from one thread; one write transaction at a time."""

    versioned: bool
    """``replays`` has a ``version`` column, bumped by every write of a replay (PostgreSQL:
    dispatchers sharing a database serialise a replay's decisions on it)."""

    pipelined: bool
    """A turn's statements go out without waiting for their results, which come with the
    commit's (PostgreSQL's pipeline mode): a turn reads a result only after :meth:`commit`."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def begin(self) -> None:
        """Open the turn's write transaction."""

    def commit(self) -> None:
        """Commit it, durable on return; raises (rolled back) if it is not."""

    def rollback(self) -> None:
        """Forget the open transaction, if any; never hides the error that led here."""

    def close(self) -> None: ...


class StoreUnavailable(Exception):
    """The database cannot be reached at open (pg_store.py): the dispatcher says so and
    exits, and the supervisor's restart policy applies (docs/operations.md)."""

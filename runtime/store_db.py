"""What a store needs of its database, whichever it is: SQLite in the data directory (the
embedded default, runtime/sqlite_store.py) or PostgreSQL (``LEA_DATABASE_URL``,
runtime/pg.py). The dispatcher's store and audit_log's each hold their SQL once, with ``?``
marks, and run it on a :class:`Database`; each adds what its own store needs (the
dispatcher's turn, the audit chain's lock and images: docs/durability.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol


class Rows(Protocol):
    """The rows of one statement."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Database(Protocol):
    """One connection, used from one thread."""

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def close(self) -> None: ...

"""Reaching PostgreSQL (``LEA_DATABASE_URL``, psycopg 3) for a store that keeps its tables
there: a bounded wait for the server that beats while it waits, durable COMMITs, a schema set
up once however many processes start at once (docs/operations.md).

Imported only by a process that uses PostgreSQL: psycopg is needed nowhere else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

CONNECT_WAIT_S = 5.0
"""How long an open tries to reach the server before giving up: within the supervisor's
start grace, so a server restarting is waited for, one that stays down is left to the
restart policy."""
_CONNECT_TIMEOUT_S = 2  # one attempt (libpq's connect_timeout: 2 s at least)
_RETRY_S = 0.25
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
              "keepalives_count": 3, "tcp_user_timeout": 10_000}
"""libpq's TCP options, unless the URL sets its own: a server cut off from us is found dead
within seconds, not TCP's hours (the connection is then lost: the process stops and its
supervisor restarts it)."""


class DatabaseUnavailable(ConnectionError):
    """The server cannot be reached (or the store's tables cannot be set up) at open: the
    process says so and exits; the supervisor's restart policy applies. (An OSError: a
    command that reads a store reports it as it reports an unreadable file.)"""


def describe(url: str) -> str:
    """``host:port/dbname`` of ``url``, for messages: never its password."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(an invalid database URL)"
    return (f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/"
            f"{info.get('dbname', info.get('user', ''))}")


def connect(url: str, wait_s: float = CONNECT_WAIT_S,
            waiting: Callable[[], None] = lambda: None) -> psycopg.Connection[Any]:
    """An autocommit connection to ``url`` whose COMMITs return once durable
    (``synchronous_commit = on``, whatever the server's default), retrying for ``wait_s``
    and calling ``waiting`` between tries; :class:`DatabaseUnavailable` if it cannot."""
    try:
        given = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise DatabaseUnavailable(f"LEA_DATABASE_URL is not a database URL: {exc}") from None
    extra: dict[str, Any] = {k: v for k, v in (
        ("connect_timeout", _CONNECT_TIMEOUT_S), *KEEPALIVES.items()) if k not in given}
    deadline = time.monotonic() + wait_s
    while True:
        try:
            conn = psycopg.connect(url, autocommit=True, **extra)
            break
        except psycopg.OperationalError as exc:
            if time.monotonic() + _RETRY_S > deadline:
                raise DatabaseUnavailable(f"PostgreSQL at {describe(url)} is unreachable: "
                                          f"{str(exc).strip()}") from None
            waiting()
            time.sleep(_RETRY_S)
    try:
        conn.execute("SET synchronous_commit = on")
    except psycopg.Error as exc:
        conn.close()
        raise DatabaseUnavailable(f"PostgreSQL at {describe(url)}: {str(exc).strip()}") from None
    return conn


def set_up(conn: psycopg.Connection[Any], lock: str, sql: str) -> None:
    """Run ``sql`` (``CREATE ... IF NOT EXISTS``) in one transaction, under an advisory lock
    named ``lock``: processes starting at once must not race on creating the same tables."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
        conn.execute(sql.encode())


OnLost = Callable[[BaseException], None]


class Session:
    """One autocommit connection running a store's SQL, written with ``?`` marks (the same
    text as on SQLite); transactions are opened and committed by hand, so that a read
    outside one is its own transaction. A connection lost while in use is reported to
    ``on_lost`` (the process stops: it may hold what was never committed), then raised."""

    def __init__(self, conn: psycopg.Connection[Any], on_lost: OnLost | None = None) -> None:
        self.conn = conn
        self._on_lost = on_lost
        self._sql: dict[str, str] = {}

    def _marks(self, sql: str) -> str:
        """``?`` marks as psycopg's ``%s`` (the stores' SQL has no ``%``)."""
        found = self._sql.get(sql)
        if found is None:
            found = self._sql[sql] = sql.replace("?", "%s")
        return found

    def _lost(self, exc: BaseException) -> None:
        if (self.conn.broken or self.conn.closed) and self._on_lost is not None:
            self._on_lost(exc)

    @property
    def in_transaction(self) -> bool:
        return self.conn.info.transaction_status in (TransactionStatus.INTRANS,
                                                     TransactionStatus.INERROR)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        try:
            return self.conn.execute(self._marks(sql), args)
        except psycopg.OperationalError as exc:
            self._lost(exc)
            raise

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if len(rows) <= 1:  # the usual case: one round trip, no batch
            for row in rows:
                self.execute(sql, row)
            return
        try:
            self.conn.cursor().executemany(self._marks(sql), rows)
        except psycopg.OperationalError as exc:
            self._lost(exc)
            raise

    def commit(self) -> None:
        """COMMIT, durable on return; raises if the server rolled the transaction back."""
        try:
            status = self.conn.execute("COMMIT").statusmessage
        except psycopg.OperationalError as exc:
            # The outcome is unknown: nothing of it may be taken as done (the caller stops).
            self._lost(exc)
            raise
        if status != "COMMIT":  # a failed transaction: the server rolled it back
            raise RuntimeError(f"the transaction was not committed ({status})")

    def rollback(self) -> None:
        if self.conn.broken or self.conn.closed:
            return  # the server rolls back a transaction whose connection is gone
        if self.in_transaction:
            self.conn.execute("ROLLBACK")

    def close(self) -> None:
        try:
            self.rollback()
        finally:
            self.conn.close()

"""The dispatcher's store on PostgreSQL (``LEA_DATABASE_URL``, psycopg 3): a
:class:`~actors.dispatcher.store_db.StoreDb` that runs the SQL of store.py.

The same guarantees as on SQLite (docs/durability.md, "The dispatcher's database on
PostgreSQL"):

- A decision is committed before its effects: the turn is one transaction (``BEGIN`` ...
  ``COMMIT``) and the session sets ``synchronous_commit = on``, whatever the server's
  default: COMMIT returns once its WAL is flushed (and, where the server has synchronous
  standbys, once they have it). A COMMIT the server turned into a ROLLBACK raises.
- Outbox ids are never reused: ``outbox.id`` comes from a sequence. A value used by a
  committed transaction is never handed out again (its WAL was flushed with the commit);
  only the values of a turn that never committed may come again after a server crash, and
  none of those was sent (the audit sender sends committed rows only). No epochs needed.
- Control replies are idempotent by request id: ``requests`` is unique on
  ``(request_id, kind)``, in the decision's transaction, as on SQLite.

The tables live in the schema ``dispatcher`` (the database may hold other stores). Each write
of a replay bumps ``replays.version``. Dispatchers sharing the database take turns: one leads,
holding an advisory lock on this connection, the others wait (election.py).
A lost connection is reported to ``on_lost`` (the dispatcher stops: what it holds in memory
may be ahead of what is committed, and it restarts from the database).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg
from loguru import logger
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from actors.dispatcher.store import SCHEMA_VERSION
from actors.dispatcher.store_db import Rows, StoreUnavailable

SCHEMA = "dispatcher"
CONNECT_WAIT_S = 5.0
"""How long an open tries to reach the server before giving up (StoreUnavailable): within
the supervisor's start grace, so a server restarting is waited for, a server that stays down
is left to the restart policy."""
_CONNECT_TIMEOUT_S = 2  # one attempt (libpq's connect_timeout: 2 s at least)
_RETRY_S = 0.25
_LOCK = "lea.dispatcher.schema"
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
              "keepalives_count": 3, "tcp_user_timeout": 10_000}
"""libpq's TCP options, unless the URL sets its own: a server cut off from us is found dead
within seconds, not TCP's hours (docs/operations.md, "Several dispatchers", gives the
server's side, which releases a cut-off leader's lock)."""

# The tables of store.py's SQLite schema, in PostgreSQL's types. ``resolved.rowid``: the
# order of insertion, under the name SQLite gives its implicit one (store.py's queries use
# it); identity columns for SQLite's AUTOINCREMENT.
_TABLES = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
SET search_path = {SCHEMA};
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS replays (
    replay_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, session_id TEXT NOT NULL,
    machine_id TEXT NOT NULL, mode TEXT NOT NULL, operator TEXT,
    created_at DOUBLE PRECISION NOT NULL, workflow BYTEA NOT NULL, status TEXT NOT NULL,
    state BYTEA NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    version BIGINT NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS replays_by_status ON replays (status, seq);
CREATE TABLE IF NOT EXISTS resolved (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY, replay_id TEXT NOT NULL,
    action_id TEXT NOT NULL, outcome TEXT NOT NULL, attempt_id TEXT NOT NULL,
    PRIMARY KEY (replay_id, action_id));
CREATE TABLE IF NOT EXISTS outbox (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind TEXT NOT NULL,
    body BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS reports (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    received_at DOUBLE PRECISION NOT NULL, replay_id TEXT NOT NULL, action_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL, sender_machine TEXT NOT NULL, status TEXT NOT NULL,
    success INTEGER NOT NULL, error TEXT, warning TEXT, body BYTEA NOT NULL);
CREATE INDEX IF NOT EXISTS reports_by_action ON reports (replay_id, action_id);
CREATE TABLE IF NOT EXISTS requests (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, request_id TEXT NOT NULL,
    kind TEXT NOT NULL, reply BYTEA NOT NULL, UNIQUE (request_id, kind));
"""

OnLost = Callable[[BaseException], None]


def describe(url: str) -> str:
    """``host:port/dbname`` of ``url``, for messages: never its password."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(an invalid database URL)"
    return (f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/"
            f"{info.get('dbname', info.get('user', ''))}")


class PgDb:
    """One autocommit connection; the turn's transaction is opened and committed by hand,
    as on SQLite, so that a read outside a turn is its own transaction."""

    versioned = True

    def __init__(self, conn: psycopg.Connection[Any], on_lost: OnLost | None = None) -> None:
        self.conn = conn
        self._on_lost = on_lost
        self._sql: dict[str, str] = {}
        self._setup()

    @classmethod
    def connect(cls, url: str, on_lost: OnLost | None = None,
                wait_s: float = CONNECT_WAIT_S,
                waiting: Callable[[], None] = lambda: None) -> PgDb:
        """Connect to ``url`` (retrying for ``wait_s``, calling ``waiting`` between tries)
        and set the schema up; raises :class:`StoreUnavailable` if the server cannot be
        reached."""
        try:
            given = conninfo_to_dict(url)
            extra: dict[str, Any] = {k: v for k, v in (
                ("connect_timeout", _CONNECT_TIMEOUT_S), *KEEPALIVES.items()) if k not in given}
        except psycopg.ProgrammingError as exc:
            raise StoreUnavailable(f"LEA_DATABASE_URL is not a database URL: {exc}") from None
        deadline = time.monotonic() + wait_s
        while True:
            try:
                conn = psycopg.connect(url, autocommit=True, **extra)
                break
            except psycopg.OperationalError as exc:
                if time.monotonic() + _RETRY_S > deadline:
                    raise StoreUnavailable(
                        f"PostgreSQL at {describe(url)} is unreachable: "
                        f"{str(exc).strip()}") from None
                waiting()
                time.sleep(_RETRY_S)
        try:
            return cls(conn, on_lost)
        except psycopg.Error as exc:  # e.g. no right to create the schema: said, not a trace
            conn.close()
            raise StoreUnavailable(f"PostgreSQL at {describe(url)}: cannot set up the "
                                   f"dispatcher's tables: {str(exc).strip()}") from None
        except BaseException:
            conn.close()
            raise

    def _setup(self) -> None:
        conn = self.conn
        conn.execute("SET synchronous_commit = on")  # durable COMMITs, whatever the default
        with conn.transaction():
            # Two dispatchers starting at once must not race on CREATE ... IF NOT EXISTS.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_LOCK,))
            conn.execute(_TABLES.encode())
            conn.execute("INSERT INTO meta VALUES ('schema_version', %s) "
                         "ON CONFLICT DO NOTHING", (str(SCHEMA_VERSION),))
            conn.execute("INSERT INTO meta VALUES ('store_id', %s) ON CONFLICT DO NOTHING",
                         (uuid.uuid4().hex,))
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                               ).fetchone()
        if row is None or row[0] != str(SCHEMA_VERSION):
            raise RuntimeError(f"dispatcher schema version {row and row[0]} in the database, "
                               f"this code knows {SCHEMA_VERSION}: refusing to use it")
        fsync = conn.execute("SHOW fsync").fetchone()
        if fsync is not None and fsync[0] != "on":
            logger.warning("dispatcher: the PostgreSQL server runs with fsync={}: a power "
                           "cut there can lose committed decisions", fsync[0])

    def _marks(self, sql: str) -> str:
        """store.py's ``?`` marks as psycopg's ``%s`` (the store's SQL has no ``%``)."""
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

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        try:
            return self.conn.execute(self._marks(sql), args)
        except psycopg.OperationalError as exc:
            self._lost(exc)
            raise

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if len(rows) <= 1:  # the usual case on the hot path: one round trip, no batch
            for row in rows:
                self.execute(sql, row)
            return
        try:
            self.conn.cursor().executemany(self._marks(sql), rows)
        except psycopg.OperationalError as exc:
            self._lost(exc)
            raise

    def begin(self) -> None:
        self.execute("BEGIN")

    def commit(self) -> None:
        try:
            status = self.conn.execute("COMMIT").statusmessage
        except psycopg.OperationalError as exc:
            # The outcome is unknown: nothing of the turn may go out (the caller stops).
            self._lost(exc)
            raise
        if status != "COMMIT":  # a failed transaction: the server rolled it back
            raise RuntimeError(f"the turn's transaction was not committed ({status})")

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

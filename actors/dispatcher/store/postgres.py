"""The dispatcher's store on PostgreSQL (``LEA_DATABASE_URL``, psycopg 3): a
:class:`~actors.dispatcher.store.db.StoreDb` that runs the SQL of dispatcher_store.py.

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
holding the leader's lease, the others wait (actors/dispatcher/leader/election.py); each turn of
the leader begins by checking its fencing token in the same transaction (lease.py).
A lost connection is reported to ``on_lost`` (the dispatcher stops: what it holds in memory
may be ahead of what is committed, and it restarts from the database).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from loguru import logger

from actors.dispatcher.store import lease
from actors.dispatcher.store.db import StoreUnavailable
from actors.dispatcher.store.sqlite import SCHEMA_VERSION
from runtime import pg

SCHEMA = "dispatcher"
_LOCK = "lea.dispatcher.schema"

# The tables of sqlite.py's schema, in PostgreSQL's types. ``resolved.rowid``: the
# order of insertion, under the name SQLite gives its implicit one (dispatcher_store.py's queries
# use it); identity columns for SQLite's AUTOINCREMENT.
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
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY, pool TEXT NOT NULL, max_attempts INTEGER NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, workflow BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS queue_items (
    queue TEXT NOT NULL, reference TEXT NOT NULL, seq BIGINT NOT NULL, state TEXT NOT NULL,
    body BYTEA NOT NULL, PRIMARY KEY (queue, reference));
CREATE INDEX IF NOT EXISTS queue_items_by_state ON queue_items (queue, state, seq);
""" + lease.TABLE


class PgDb(pg.Session):
    """The dispatcher's tables in one session (:class:`runtime.pg.Session`); the turn's
    transaction is opened and committed by hand, as on SQLite, so that a read outside a turn
    is its own transaction."""

    versioned = True
    pipelined = True
    _pipeline: contextlib.ExitStack | None = None  # the turn's, while one is open
    fence_token: int | None = None
    """The leader's fencing token (lease.py), checked at the start of every turn; None: no
    check (a standby commits nothing, a store read by a command decides nothing)."""

    def __init__(self, conn: psycopg.Connection[Any], on_lost: pg.OnLost | None = None
                 ) -> None:
        super().__init__(conn, on_lost)
        self._setup()

    @classmethod
    def connect(cls, url: str, on_lost: pg.OnLost | None = None,
                wait_s: float = pg.CONNECT_WAIT_S,
                waiting: Callable[[], None] = lambda: None) -> PgDb:
        """Connect to ``url`` (retrying for ``wait_s``, calling ``waiting`` between tries)
        and set the schema up; raises :class:`StoreUnavailable` if the server cannot be
        reached."""
        try:
            conn = pg.connect(url, wait_s, waiting)
        except pg.DatabaseUnavailable as exc:
            raise StoreUnavailable(str(exc)) from None
        try:
            return cls(conn, on_lost)
        except psycopg.Error as exc:  # e.g. no right to create the schema: said, not a trace
            conn.close()
            raise StoreUnavailable(f"PostgreSQL at {pg.describe(url)}: cannot set up the "
                                   f"dispatcher's tables: {str(exc).strip()}") from None
        except BaseException:
            conn.close()
            raise

    def _setup(self) -> None:
        conn = self.conn
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

    @property
    def in_transaction(self) -> bool:
        return self._pipeline is not None or super().in_transaction

    def begin(self) -> None:
        """Open the turn's transaction in pipeline mode: its statements go out without
        waiting for their results, which all come back with the COMMIT's, one round trip
        for the turn (a read that needs its rows waits for them: dispatcher_store.py reads none in a
        turn). The fence first (lease.py): another dispatcher leads, and the turn fails."""
        self._pipeline = contextlib.ExitStack()
        try:
            self._pipeline.enter_context(self.conn.pipeline())
            self.execute("BEGIN")
            if self.fence_token is not None:
                self.execute(f"SELECT {SCHEMA}.fence(?)", (self.fence_token,))
        except BaseException:
            self.rollback()
            raise

    def commit(self) -> None:
        """COMMIT, and every result of the turn with it; raises (the server's error of the
        first statement that failed) if the turn was not committed."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is None:
            super().commit()
            return
        try:
            try:
                done = self.conn.execute(b"COMMIT")
            except BaseException:
                # An earlier statement's error arrived with the COMMIT's send: the pipeline
                # must still end, or the session stays in it, aborted, for every later use.
                with contextlib.suppress(psycopg.Error):
                    pipeline.close()
                raise
            pipeline.close()  # sends the turn and waits for its results
        except psycopg.OperationalError as exc:
            self._lost(exc)
            raise
        if done.statusmessage != "COMMIT":
            raise RuntimeError(f"the transaction was not committed ({done.statusmessage})")

    def rollback(self) -> None:
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            with contextlib.suppress(psycopg.Error):  # the error that led here is raised
                pipeline.close()
        super().rollback()

"""Persistence of the dispatcher's state, its outbox and its reports log (D1).

The SQL and the group commit are here, run on SQLite (sqlite.py: the embedded default, a
file in the data directory) or on PostgreSQL (postgres.py, when ``LEA_DATABASE_URL`` is
set); open.py opens the one the settings name. What follows is said of SQLite; the
PostgreSQL guarantees are the same (docs/durability.md).

Durability (docs/durability.md): WAL journal, ``synchronous=FULL``, and nothing leaves the
dispatcher before the commit that explains it is fsync'ed. The loop *stages* each decision in
the transaction of its turn (:meth:`DispatcherStore.stage`) and *hardens* the turn once
(:meth:`DispatcherStore.harden`: one COMMIT, one fsync of the WAL for every decision of the
turn), and only then are the turn's replies, dispatches and audit records sent: a group
commit. A crash or a power cut before the COMMIT loses decisions nobody has heard of.
A thread (wal_syncer.py) checkpoints the WAL into the database file off the loop.

Outbox ids (audit record ids are made of them) are never reused, whatever a cut rolls back:
each open of the store durably starts a new *epoch*, and the ids of an epoch start at
``epoch << 32`` (:func:`runtime.sqlite_store.start_epoch`).

Writes are kept small: a replay's workflow is written once, at its first commit; every later
transition rewrites only the mutable part (a few hundred bytes of msgpack) and appends the
action ids newly resolved (append-only table).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import msgpack
from loguru import logger
from pydantic import ValidationError

from actors.dispatcher.machine.decision import (
    AuditRecord,
    Decision,
    Effect,
    RecordReport,
    effect_from_dict,
    effect_to_dict,
)
from actors.dispatcher.machine.queue_book import QueueDef, QueueItem
from actors.dispatcher.machine.state import (
    TERMINAL,
    DispatcherState,
    ReplayState,
    Resolution,
    mutable_dump,
    mutable_restore,
)
from actors.dispatcher.store import queue_rows as queue_store
from actors.dispatcher.store.db import StoreDb
from actors.dispatcher.store.fresh_rows import FreshRows
from actors.dispatcher.store.sqlite import SqliteDb
from actors.dispatcher.store.wal_syncer import SYNC_INTERVAL_S
from messages.workflow import Workflow
from runtime.store_db import Rows

DB_NAME = "dispatcher.sqlite3"

_TERMINAL = tuple(sorted(TERMINAL))
KEEP_REQUESTS = 4096
"""Control requests remembered: copies come seconds apart (retries, the broker's queue)."""
_SCREENSHOTS = ("screenshot_before", "screenshot_after")
OUTBOX_EFFECTS = (AuditRecord,)
"""Effects kept in the outbox until performed: nothing else would bring them back after a
crash. The others are derived again from the committed state: the in-flight actions are
re-sent at start (new attempt ids, with their watchdog tracking), the watchdog asks about
attempts it holds and is told "stale" for finished ones, and bus events are for watching
only (docs/protocol.md, "The event bus"); writing them too would cost inserts on every
step (bench/throughput.py)."""


def _pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False)


_ROWS_A_STATEMENT = 400
"""Outbox rows inserted or deleted by one statement at most (two parameters a row: within
SQLite's oldest limit of 999 parameters a statement)."""


def _ids(rows: Rows) -> list[int]:
    """The ids a multi-row ``INSERT ... RETURNING id`` gave, in the order of its rows: both
    databases number the rows of one VALUES list in order (AUTOINCREMENT, a sequence), but
    neither promises the order of RETURNING."""
    return sorted(int(row[0]) for row in rows.fetchall())


class DispatcherStore:
    """The dispatcher's database; one instance per process, used from one thread.

    ``where``: the SQLite file, or an open :class:`StoreDb` (postgres.py)."""

    def __init__(self, where: str | Path | StoreDb, *, keep_finished: int = 1000,
                 sync_interval_s: float = SYNC_INTERVAL_S) -> None:
        self.keep_finished = keep_finished
        self.path: Path | None = None  # the SQLite file
        self._db: StoreDb
        if isinstance(where, str | Path):
            self.path = Path(where)
            self._db = SqliteDb(self.path, sync_interval_s)
        else:
            self._db = where
        (self.store_id,) = self._db.execute(
            "SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        self.durable_outbox_id = self._max_outbox_id()
        """Outbox rows up to this id are on disk: the audit sender sends no other."""
        self._fresh = FreshRows(self.durable_outbox_id)  # what pending_outbox needs not read
        self._staged_sent: list[int] = []  # rows the open turn deletes (``sent``)
        self.staged = 0  # decisions in the open transaction (0: none open)
        self._staged_known: set[str] = set()
        self._staged_resolved: dict[str, int] = {}
        # The turn's outbox rows, a statement's at a time: their ids, or where to read them at
        # the commit (pipelined), with their effects in the order inserted.
        self._outbox_rows: list[tuple[Rows | list[int], list[Effect]]] = []
        self._known: set[str] = set()  # replays whose immutable head is in the database
        self._resolved_written: dict[str, int] = {}  # replay_id -> entries of ``resolved``

    @property
    def db(self) -> StoreDb:
        """The database the store runs on (the election renews its lease there)."""
        return self._db

    @classmethod
    def in_dir(cls, data_dir: str | Path, **kwargs: Any) -> DispatcherStore:
        """The store of ``data_dir`` (``var/`` by default in the settings)."""
        return cls(Path(data_dir) / DB_NAME, **kwargs)

    def close(self) -> None:
        """Close; a turn staged and not hardened is rolled back (nobody heard of it)."""
        self._db.close()

    def _max_outbox_id(self) -> int:
        (top,) = self._db.execute("SELECT coalesce(max(id), 0) FROM outbox").fetchone()
        return int(top)

    def outbox_count(self) -> int:
        """Audit records committed and not yet acknowledged by audit_log (the backlog)."""
        (n,) = self._db.execute("SELECT count(*) FROM outbox").fetchone()
        return int(n)

    # Loading ------------------------------------------------------------------------------

    def load(self) -> DispatcherState:
        """Every unfinished replay, plus the ``keep_finished`` most recent finished ones."""
        marks = ",".join("?" * len(_TERMINAL))
        columns = ("replay_id, seq, session_id, machine_id, mode, operator, created_at, "
                   "workflow, state")
        rows = self._db.execute(
            f"SELECT {columns} FROM replays WHERE status NOT IN ({marks}) "
            f"UNION ALL SELECT * FROM (SELECT {columns} FROM replays "
            f"WHERE status IN ({marks}) ORDER BY seq DESC LIMIT ?) AS finished",
            (*_TERMINAL, *_TERMINAL, self.keep_finished)).fetchall()
        state = DispatcherState()
        for rid, seq, sid, mid, mode, operator, created_at, workflow, mutable in sorted(
                rows, key=lambda row: row[1]):
            try:
                r = ReplayState(replay_id=rid, session_id=sid, machine_id=mid,
                                workflow=Workflow.model_validate(_unpack(workflow)), mode=mode,
                                operator=operator, seq=seq, created_at=created_at,
                                updated_at=created_at)
                mutable_restore(r, _unpack(mutable))
            except ValidationError as exc:
                # Stored by an older version whose rules were looser (a monitor index no
                # workstation has...): never run it blind, never crash on it. It stays in
                # the store for a person (docs/operations.md, "Upgrades").
                logger.error("replay {} in the store does not validate any more and is not "
                             "loaded (it stays in the store): {}", rid, str(exc)[:500])
                continue
            for action_id, outcome, attempt_id in self._db.execute(
                    "SELECT action_id, outcome, attempt_id FROM resolved WHERE replay_id = ? "
                    "ORDER BY rowid", (rid,)):
                r.resolved[action_id] = Resolution(outcome, attempt_id)
            state.replays[rid] = r
            self._known.add(rid)
            self._resolved_written[rid] = len(r.resolved)
        (max_seq,) = self._db.execute("SELECT coalesce(max(seq), 0) FROM replays").fetchone()
        state.next_seq = int(max_seq) + 1
        return state

    # Committing ---------------------------------------------------------------------------

    def stage(self, replays: Iterable[ReplayState], effects: Iterable[Effect],
              request: tuple[str, str, bytes] | None = None, *, sent: Iterable[int] = (),
              queues: Sequence[QueueDef] = (), new_items: Sequence[QueueItem] = (),
              items: Sequence[QueueItem] = ()) -> None:
        """Write changed replays, the reports log and the outbox in the turn's transaction
        (begun by the first stage of a turn); :meth:`harden` commits them all and returns
        the outbox rows written ``(outbox_id, effect)``. ``RecordReport`` effects go
        to the reports log; only :data:`OUTBOX_EFFECTS` go to the outbox, the others are for
        the caller to perform (see there why). ``request`` ``(request_id, kind, reply)``
        records the control request this decision applies, with its encoded reply (see
        :meth:`reply_for`). ``sent``: outbox ids performed since, deleted.
        A failed write rolls the whole turn back and raises: the caller must not send
        anything of it, nor go on from its memory (the dispatcher stops, docs/durability.md).
        """
        replays = list(replays)
        if not self._db.in_transaction:
            self._db.begin()
        try:
            db = self._db
            acked = list(sent)
            self._staged_sent += acked
            for at in range(0, len(acked), _ROWS_A_STATEMENT):
                ids = acked[at:at + _ROWS_A_STATEMENT]
                db.execute(f"DELETE FROM outbox WHERE id IN ({', '.join('?' * len(ids))})",
                           ids)
            for r in replays:
                self._staged_resolved[r.replay_id] = self._write_replay(db, r)
                self._staged_known.add(r.replay_id)
            queue_store.write(db, queues, new_items, items)
            outbox: list[Effect] = []
            for effect in effects:
                if isinstance(effect, RecordReport):
                    self._write_report(db, effect)
                elif isinstance(effect, OUTBOX_EFFECTS):
                    outbox.append(effect)
                elif not isinstance(effect, Effect):
                    raise TypeError(f"not an effect: {effect!r}")
            for at in range(0, len(outbox), _ROWS_A_STATEMENT):
                self._write_outbox(db, outbox[at:at + _ROWS_A_STATEMENT])
            if request is not None:
                db.execute("INSERT INTO requests (request_id, kind, reply) VALUES (?, ?, ?)",
                           request)
                db.execute("DELETE FROM requests WHERE seq <= (SELECT max(seq) FROM requests)"
                           " - ?", (KEEP_REQUESTS,))
        except BaseException:
            self.rollback()
            raise
        self.staged += 1

    def harden(self) -> list[tuple[int, Effect]]:
        """Commit the turn's transaction: one fsync for every decision staged in it; the
        outbox rows it wrote ``(outbox_id, effect)``. Raises (and rolls back) if the commit
        fails."""
        if not self._db.in_transaction:
            self.staged = 0
            return []
        try:
            self._db.commit()
            written = self._read_outbox_ids()
        except BaseException:
            self.rollback()
            raise
        self._outbox_rows.clear()
        # Only once committed: a rolled-back transaction must be rewritten in full next time.
        self._known.update(self._staged_known)
        self._resolved_written.update(self._staged_resolved)
        self._staged_known.clear()
        self._staged_resolved.clear()
        self.staged = 0
        self._fresh.committed(written, self._staged_sent)
        self._staged_sent.clear()
        # The ids come from a sequence: the turn's are above every earlier one.
        self.durable_outbox_id = max([self.durable_outbox_id, *(i for i, _ in written)])
        return written

    def rollback(self) -> None:
        """Forget the turn's transaction."""
        self._outbox_rows.clear()
        self._staged_sent.clear()
        self._db.rollback()
        self._staged_known.clear()
        self._staged_resolved.clear()
        self.staged = 0

    def commit(self, replays: Iterable[ReplayState], effects: Iterable[Effect],
               request: tuple[str, str, bytes] | None = None, *, sent: Iterable[int] = ()
               ) -> list[tuple[int, Effect]]:
        """:meth:`stage` then :meth:`harden`: durable on return."""
        self.stage(replays, effects, request, sent=sent)
        return self.harden()

    def commit_decision(self, decision: Decision,
                        request: tuple[str, str, bytes] | None = None, *,
                        sent: Iterable[int] = (), harden: bool = True,
                        ) -> list[tuple[int, Effect]]:
        """:meth:`stage` (and :meth:`harden`) of a decision: the replays it writes and its
        effects."""
        self.stage(decision.writes, decision.effects, request, sent=sent,
                   queues=decision.new_queues, new_items=decision.new_items,
                   items=decision.items)
        return self.harden() if harden else self._staged_rows()

    def _staged_rows(self) -> list[tuple[int, Effect]]:
        """The outbox rows staged in the open turn, their ids read now (on PostgreSQL the
        wait for the turn's results so far: the dispatcher's loop stages without it)."""
        read = self._read_outbox_ids()
        self._outbox_rows = [([i], [e]) for i, e in read]
        return read

    def _write_outbox(self, db: StoreDb, effects: list[Effect]) -> None:
        """One statement for ``effects``' outbox rows: one round trip less per row on
        PostgreSQL, one statement less per row on both (docs/performance.md). Their ids are
        read at the commit (harden): on PostgreSQL the turn's statements go out without
        waiting for their results (postgres.py)."""
        bodies = [effect_to_dict(effect) for effect in effects]
        rows = db.execute(
            "INSERT INTO outbox (kind, body) VALUES "
            f"{', '.join(['(?, ?)'] * len(bodies))} RETURNING id",
            [v for body in bodies for v in (body["kind"], _pack(body))])
        self._outbox_rows.append((rows if db.pipelined else _ids(rows), effects))

    def _read_outbox_ids(self) -> list[tuple[int, Effect]]:
        """The staged outbox rows ``(outbox_id, effect)``, their ids read now."""
        written: list[tuple[int, Effect]] = []
        for rows, effects in self._outbox_rows:
            ids = rows if isinstance(rows, list) else _ids(rows)
            if len(ids) != len(effects):
                raise RuntimeError(f"{len(effects)} outbox rows written, {len(ids)} ids read")
            written.extend(zip(ids, effects, strict=True))
        return written

    def reply_for(self, request_id: str, kind: str) -> bytes | None:
        """The reply recorded for control request ``request_id`` of ``kind``, if applied."""
        row = self._db.execute("SELECT reply FROM requests WHERE request_id = ? AND kind = ?",
                               (request_id, kind)).fetchone()
        return None if row is None else bytes(row[0])

    def _write_replay(self, db: StoreDb, r: ReplayState) -> int:
        mutable = _pack(mutable_dump(r))
        bump = ", version = replays.version + 1" if db.versioned else ""
        if r.replay_id in self._known or r.replay_id in self._staged_known:
            db.execute(f"UPDATE replays SET status = ?, state = ?, updated_at = ?{bump} "
                       "WHERE replay_id = ?", (r.status, mutable, r.updated_at, r.replay_id))
        else:
            db.execute(
                "INSERT INTO replays (replay_id, seq, session_id, machine_id, mode, operator, "
                "created_at, workflow, status, state, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (replay_id) DO UPDATE "
                "SET status = excluded.status, state = excluded.state, "
                f"updated_at = excluded.updated_at{bump}",
                (r.replay_id, r.seq, r.session_id, r.machine_id, r.mode, r.operator,
                 r.created_at, _pack(r.workflow.model_dump(mode="json")), r.status, mutable,
                 r.updated_at))
        fresh = len(r.resolved) - self._staged_resolved.get(
            r.replay_id, self._resolved_written.get(r.replay_id, 0))
        # The newest entries only, without walking the older ones (``resolved`` only grows).
        db.executemany(
            "INSERT INTO resolved (replay_id, action_id, outcome, attempt_id) "
            "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(r.replay_id, aid, res.outcome, res.attempt_id)
             for aid, res in reversed(list(islice(reversed(r.resolved.items()),
                                                  max(0, fresh))))])
        return len(r.resolved)

    def load_queues(self) -> tuple[list[QueueDef], list[QueueItem]]:
        """Every work queue and every item (queue_rows.py)."""
        return queue_store.load(self._db)

    def _write_report(self, db: StoreDb, rec: RecordReport) -> None:
        # Screenshots go to the audit trail (content-addressed); the log keeps their hashes.
        body = (rec.report.model_dump(mode="python", exclude=set(_SCREENSHOTS))
                if rec.dumped is None
                else {k: v for k, v in rec.dumped.items() if k not in _SCREENSHOTS})
        for name in _SCREENSHOTS:
            shot = getattr(rec.report, name)
            if shot is not None:
                body[name] = {"sha256": hashlib.sha256(shot).hexdigest(), "bytes": len(shot)}
        r = rec.report
        db.execute(
            "INSERT INTO reports (received_at, replay_id, action_id, attempt_id, sender_machine,"
            " status, success, error, warning, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (rec.at, r.replay_id, r.action_id, r.attempt_id, rec.sender_machine, rec.status,
             int(r.success), r.error, r.warning, _pack(body)))

    # Outbox and reports log ---------------------------------------------------------------

    def pending_outbox(self, limit: int | None = None, after: int = 0,
                       upto: int | None = None) -> list[tuple[int, Effect]]:
        """Effects committed but not yet marked sent, oldest first (ids above ``after``, up
        to ``upto``)."""
        fresh = (self._fresh.read(after, upto, limit)
                 if upto is not None and upto <= self.durable_outbox_id else None)
        if fresh is not None:  # the audit sender's question, every row in memory
            return fresh
        rows = self._db.execute(
            "SELECT id, body FROM outbox WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
            (after, (1 << 62) if upto is None else upto,
             (1 << 62) if limit is None else limit)).fetchall()
        return [(oid, effect_from_dict(_unpack(body))) for oid, body in rows]

    def mark_sent(self, outbox_ids: Iterable[int]) -> None:
        """Forget performed effects (their ids are never reused), in the turn's transaction.

        A cut that brings rows back only has them performed again, which every receiver
        deduplicates (as after a crash before this call).
        """
        ids = list(outbox_ids)
        if ids:
            self.stage((), (), sent=ids)

    def reports(self, replay_id: str | None = None) -> list[dict[str, Any]]:
        """The reports log, oldest first (every report received, with its ack status)."""
        sql = ("SELECT id, received_at, replay_id, action_id, attempt_id, sender_machine, "
               "status, success, error, warning, body FROM reports")
        args: tuple[str, ...] = ()
        if replay_id is not None:
            sql, args = sql + " WHERE replay_id = ?", (replay_id,)
        keys = ("id", "received_at", "replay_id", "action_id", "attempt_id", "sender_machine",
                "status", "success", "error", "warning", "body")
        out = []
        for row in self._db.execute(sql + " ORDER BY id", args):
            item = dict(zip(keys, row, strict=True))
            item["success"] = bool(item["success"])
            item["body"] = _unpack(item["body"])
            out.append(item)
        return out

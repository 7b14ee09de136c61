"""SQLite persistence of the dispatcher's state, its outbox and its reports log (D1).

Durability: WAL journal. Every commit survives kill -9 of the dispatcher (once COMMIT
returns the WAL is in the OS page cache). A *durable* commit (``synchronous=FULL``, the
default) is also fsync'ed, so it survives an OS crash or power cut too; and since the WAL
is one file, its fsync hardens every earlier commit as well.

Not every commit is durable: ``commit(durable=False)`` is the dispatcher's hot path, a report
accepted whose replay runs on or completes. Such a commit is ``synchronous=NORMAL``: no fsync in
the loop; a thread (syncer.py) checkpoints the WAL every 50 ms, which fsyncs it. Until then
an OS crash may roll back the last ones (the database stays consistent). That loses nothing:
the dispatcher restarts with the action of an earlier step in flight and re-sends it, and the
agent's on-disk ledger (fsync'ed, on the workstation, 256 actions) answers from what it
recorded, without executing again (``already_executed``, spec/03 cases g/k), step after step
up to where it was. To keep that window well inside the ledger, a commit is made durable
anyway when ``MAX_UNSYNCED_COMMITS`` are not known on disk, or none has been for
``MAX_UNSYNCED_S`` (the syncer fell behind). The reply to a request (a report's ack
included) is still sent only after its commit.
Why: an fsync cost 0.4-20 ms on the shared 2-core VMs (under load), a whole step 0.3 ms
without it; with one per step the dispatcher spent half its time in fsync and missed the
turnaround and throughput targets (bench/turnaround.py, bench/throughput.py). Everything
else stays durable: what people decided (start, resume, pause, cancel), hellos, the
watchdog's orphans, and a report that pauses a replay (re-sent, the agent's answer carries
``already_executed`` instead of the warning that paused, so the pause would not come back).

Writes are kept small: a replay's workflow is written once, at its first commit; every later
transition rewrites only the mutable part (a few hundred bytes of msgpack) and appends the
action ids newly resolved (append-only table).
"""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any, Literal

import msgpack

from actors.dispatcher.effects import (
    AuditRecord,
    Decision,
    Effect,
    RecordReport,
    effect_from_dict,
    effect_to_dict,
)
from actors.dispatcher.state import (
    TERMINAL,
    DispatcherState,
    ReplayState,
    Resolution,
    mutable_dump,
    mutable_restore,
)
from actors.dispatcher.syncer import SYNC_INTERVAL_S, WalSyncer
from messages.workflow import Workflow

SCHEMA_VERSION = 1
DB_NAME = "dispatcher.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS replays (
    replay_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, session_id TEXT NOT NULL,
    machine_id TEXT NOT NULL, mode TEXT NOT NULL, operator TEXT, created_at REAL NOT NULL,
    workflow BLOB NOT NULL, status TEXT NOT NULL, state BLOB NOT NULL,
    updated_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS replays_by_status ON replays (status, seq);
CREATE TABLE IF NOT EXISTS resolved (
    replay_id TEXT NOT NULL, action_id TEXT NOT NULL, outcome TEXT NOT NULL,
    attempt_id TEXT NOT NULL, PRIMARY KEY (replay_id, action_id));
-- AUTOINCREMENT: an outbox id is never reused, so receivers can dedupe on it.
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY AUTOINCREMENT, received_at REAL NOT NULL,
    replay_id TEXT NOT NULL, action_id TEXT NOT NULL, attempt_id TEXT NOT NULL,
    sender_machine TEXT NOT NULL, status TEXT NOT NULL, success INTEGER NOT NULL,
    error TEXT, warning TEXT, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS reports_by_action ON reports (replay_id, action_id);
-- Control requests applied, by envelope id, with the reply sent: a copy of one (a Lazy
-- Pirate retry, or a copy the broker queued while we were down) gets that reply again.
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, kind TEXT NOT NULL,
    reply BLOB NOT NULL, UNIQUE (request_id, kind));
"""

_TERMINAL = tuple(sorted(TERMINAL))
MAX_UNSYNCED_COMMITS = 128
"""Commits not known on disk at most: each one accepts one step of one agent, and an agent's
ledger remembers 256, so a rolled-back window is always answered from it."""
MAX_UNSYNCED_S = 1.0
"""... and for at most this long."""
WAL_AUTOCHECKPOINT = 10_000
"""Pages (4 KiB) before the loop's own connection checkpoints: the syncer does it before."""
KEEP_REQUESTS = 4096
"""Control requests remembered: copies come seconds apart (retries, the broker's queue)."""
_SCREENSHOTS = ("screenshot_before", "screenshot_after")
OUTBOX_EFFECTS = (AuditRecord,)
"""Effects kept in the outbox until performed: nothing else would bring them back after a
crash. The others are derived again from the committed state: the in-flight actions are
re-sent at start (new attempt ids, with their watchdog tracking), the watchdog asks about
attempts it holds and is told "stale" for finished ones, and bus events are for watching
only (DESIGN.md §3). Writing them too cost 5 inserts a step (bench/throughput.py)."""


def _pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False)


class DispatcherStore:
    """The dispatcher's database; one instance per process, used from one thread."""

    def __init__(self, path: str | Path, *, synchronous: Literal["FULL", "NORMAL"] = "FULL",
                 keep_finished: int = 1000, sync_interval_s: float = SYNC_INTERVAL_S) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.keep_finished = keep_finished
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._durable_level: str = synchronous  # of a durable commit
        self._level: str = synchronous  # as set on the connection now
        self._syncer: WalSyncer | None = None  # started by the first non-durable commit
        self._sync_interval_s = sync_interval_s
        self.last_durable = True  # whether the last commit was fsync'ed (for tests, logs)
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                         (str(SCHEMA_VERSION),))
        # Names this database in the ids of what it sends (audit record ids): a database
        # made anew restarts its outbox ids, never its store id.
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)",
                         (uuid.uuid4().hex,))
        (self.store_id,) = self._db.execute(
            "SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        self._known: set[str] = set()  # replays whose immutable head is in the database
        self._resolved_written: dict[str, int] = {}  # replay_id -> entries of ``resolved``

    @classmethod
    def in_dir(cls, data_dir: str | Path, **kwargs: Any) -> DispatcherStore:
        """The store of ``data_dir`` (``var/`` by default in the settings)."""
        return cls(Path(data_dir) / DB_NAME, **kwargs)

    def close(self) -> None:
        if self._syncer is not None:
            self._syncer.close()
        self._db.close()

    def _synchronous(self, level: str) -> None:
        """Set the connection's ``synchronous`` for the next transactions (not within one)."""
        if level != self._level:
            self._db.execute(f"PRAGMA synchronous={level}")
            self._level = level

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    # Loading ------------------------------------------------------------------------------

    def load(self) -> DispatcherState:
        """Every unfinished replay, plus the ``keep_finished`` most recent finished ones."""
        marks = ",".join("?" * len(_TERMINAL))
        columns = ("replay_id, seq, session_id, machine_id, mode, operator, created_at, "
                   "workflow, state")
        rows = self._db.execute(
            f"SELECT {columns} FROM replays WHERE status NOT IN ({marks}) "
            f"UNION ALL SELECT * FROM (SELECT {columns} FROM replays "
            f"WHERE status IN ({marks}) ORDER BY seq DESC LIMIT ?)",
            (*_TERMINAL, *_TERMINAL, self.keep_finished)).fetchall()
        state = DispatcherState()
        for rid, seq, sid, mid, mode, operator, created_at, workflow, mutable in sorted(
                rows, key=lambda row: row[1]):
            r = ReplayState(replay_id=rid, session_id=sid, machine_id=mid,
                            workflow=Workflow.model_validate(_unpack(workflow)), mode=mode,
                            operator=operator, seq=seq, created_at=created_at,
                            updated_at=created_at)
            mutable_restore(r, _unpack(mutable))
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

    def commit(self, replays: Iterable[ReplayState], effects: Iterable[Effect],
               request: tuple[str, str, bytes] | None = None, *, durable: bool = True,
               sent: Iterable[int] = ()) -> list[tuple[int, Effect]]:
        """Persist changed replays, the reports log and the outbox in ONE transaction.

        Returns the outbox rows written ``(outbox_id, effect)``, to perform then mark sent.
        ``RecordReport`` effects go to the reports log; only :data:`OUTBOX_EFFECTS` go to the
        outbox, the others are for the caller to perform (see there why). ``request``
        ``(request_id, kind, reply)`` records the control request this decision applies,
        with its encoded reply (see :meth:`reply_for`). ``durable=False``: see the module
        docstring. ``sent``: outbox ids performed since, deleted in the same transaction.
        """
        replays = list(replays)
        written: list[tuple[int, Effect]] = []
        resolved_counts: dict[str, int] = {}
        if not durable and self._syncer is None:
            self._db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT}")
            self._syncer = WalSyncer(self.path, self._sync_interval_s)
        if not durable and self._syncer is not None:
            commits, age = self._syncer.unsynced()
            durable = commits >= MAX_UNSYNCED_COMMITS or age >= MAX_UNSYNCED_S
        self._synchronous(self._durable_level if durable else "NORMAL")
        with self._transaction() as db:
            db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in sent])
            for r in replays:
                resolved_counts[r.replay_id] = self._write_replay(db, r)
            for effect in effects:
                if isinstance(effect, RecordReport):
                    self._write_report(db, effect)
                    continue
                if not isinstance(effect, OUTBOX_EFFECTS):
                    if not isinstance(effect, Effect):
                        raise TypeError(f"not an effect: {effect!r}")
                    continue
                body = effect_to_dict(effect)
                cur = db.execute("INSERT INTO outbox (kind, body) VALUES (?, ?)",
                                 (body["kind"], _pack(body)))
                assert cur.lastrowid is not None
                written.append((cur.lastrowid, effect))
            if request is not None:
                db.execute("INSERT INTO requests (request_id, kind, reply) VALUES (?, ?, ?)",
                           request)
                db.execute("DELETE FROM requests WHERE seq <= (SELECT max(seq) FROM requests)"
                           " - ?", (KEEP_REQUESTS,))
        # Only once committed: a rolled-back transaction must be rewritten in full next time.
        self._known.update(r.replay_id for r in replays)
        self._resolved_written.update(resolved_counts)
        self.last_durable = durable and self._durable_level == "FULL"
        if self._syncer is not None:
            self._syncer.committed(self.last_durable)
        return written

    def unsynced(self) -> int:
        """Commits not known to be on disk yet (0 when every commit so far was durable)."""
        return 0 if self._syncer is None else self._syncer.unsynced()[0]

    def commit_decision(self, replays: Mapping[str, ReplayState], decision: Decision,
                        request: tuple[str, str, bytes] | None = None, *,
                        durable: bool = True, sent: Iterable[int] = (),
                        ) -> list[tuple[int, Effect]]:
        """:meth:`commit` of ``decision.changed`` looked up in the core's ``replays``."""
        return self.commit([replays[i] for i in sorted(decision.changed) if i in replays],
                           decision.effects, request, durable=durable, sent=sent)

    def reply_for(self, request_id: str, kind: str) -> bytes | None:
        """The reply recorded for control request ``request_id`` of ``kind``, if applied."""
        row = self._db.execute("SELECT reply FROM requests WHERE request_id = ? AND kind = ?",
                               (request_id, kind)).fetchone()
        return None if row is None else bytes(row[0])

    def _write_replay(self, db: sqlite3.Connection, r: ReplayState) -> int:
        mutable = _pack(mutable_dump(r))
        if r.replay_id in self._known:
            db.execute("UPDATE replays SET status = ?, state = ?, updated_at = ? "
                       "WHERE replay_id = ?", (r.status, mutable, r.updated_at, r.replay_id))
        else:
            db.execute(
                "INSERT INTO replays (replay_id, seq, session_id, machine_id, mode, operator, "
                "created_at, workflow, status, state, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (replay_id) DO UPDATE "
                "SET status = excluded.status, state = excluded.state, "
                "updated_at = excluded.updated_at",
                (r.replay_id, r.seq, r.session_id, r.machine_id, r.mode, r.operator,
                 r.created_at, _pack(r.workflow.model_dump(mode="json")), r.status, mutable,
                 r.updated_at))
        fresh = len(r.resolved) - self._resolved_written.get(r.replay_id, 0)
        # The newest entries only, without walking the older ones (``resolved`` only grows).
        db.executemany(
            "INSERT OR IGNORE INTO resolved (replay_id, action_id, outcome, attempt_id) "
            "VALUES (?, ?, ?, ?)",
            [(r.replay_id, aid, res.outcome, res.attempt_id)
             for aid, res in reversed(list(islice(reversed(r.resolved.items()),
                                                  max(0, fresh))))])
        return len(r.resolved)

    def _write_report(self, db: sqlite3.Connection, rec: RecordReport) -> None:
        # Screenshots go to the audit trail (content-addressed); the log keeps their hashes.
        body = rec.report.model_dump(mode="python", exclude=set(_SCREENSHOTS))
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

    def pending_outbox(self, limit: int | None = None, after: int = 0
                       ) -> list[tuple[int, Effect]]:
        """Effects committed but not yet marked sent, oldest first (ids above ``after``)."""
        rows = self._db.execute("SELECT id, body FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
                                (after, -1 if limit is None else limit)).fetchall()
        return [(oid, effect_from_dict(_unpack(body))) for oid, body in rows]

    def mark_sent(self, outbox_ids: Iterable[int]) -> None:
        """Forget performed effects (their ids are never reused).

        Never fsync'ed for itself: rows an OS crash brings back are performed again, which
        every receiver deduplicates (as after a crash before this call).
        """
        ids = [(i,) for i in outbox_ids]
        if ids:
            self._synchronous("NORMAL")
            with self._transaction() as db:
                db.executemany("DELETE FROM outbox WHERE id = ?", ids)

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

"""The agent's on-disk ledger of executed actions (docs/architecture.md).

One row per ``(replay_id, action_id)``: which attempt started it, whether it finished, the
report first sent for it and the report still waiting for the dispatcher's acknowledgement
(the outbox). Action ids are stable per workflow step, so the replay is part of the key: the
same step in a new replay of the workflow is a new action, executed again; only a
re-delivery within one replay is answered from the ledger.

Some rows are *aliases* (``answered_by`` set): another action id of the same step, answered
by that execution and never executed itself. A dispatch that redoes a step the watchdog gave
up (``DispatchAction.supersedes``) records, when it begins, an alias for each id it
supersedes, so a stale copy of one arriving later is answered, not executed; and a dispatch
answered from a superseded id's execution gets an alias row to hold its report. An alias
row's state is ``finished`` (nothing of it can be half-done); its outbox is its own.

Durability is the point of this module. SQLite in WAL mode with ``synchronous=FULL``: when
:meth:`Ledger.begin` returns, the *started* mark is on disk, and only then may the executor
touch the screen. So after a crash the agent knows which actions it may have half-done, and
never runs an action twice because it forgot it ran it.

The table is bounded (256 executed actions by default): past the bound, the oldest
*finished and acked* rows go, with their aliases. Rows still started, or whose report (or
an alias's) is unacked, are never evicted (losing them would lose a report or an
exactly-once guarantee), so the table may briefly exceed the bound.

The file carries its schema version (``PRAGMA user_version``); a file of another version is
refused (:class:`LedgerVersionError`) rather than read wrongly or silently started afresh;
version 2 (before aliases) is upgraded in place: the same rows, none of them an alias.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

import filelock

from messages.codec import decode, encode, new_id
from messages.dispatch import ActionReport, DispatchAction
from runtime import sqlite_store

DEFAULT_CAPACITY = 256
SCHEMA_VERSION = 3
"""Version 1 (unversioned, ``user_version`` 0) was keyed by ``action_id`` alone; version 2
had no ``answered_by`` (aliases)."""

State = Literal["started", "finished"]

_SCHEMA = """
CREATE TABLE actions (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    replay_id      TEXT NOT NULL,
    action_id      TEXT NOT NULL,
    attempt_id     TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    machine_id     TEXT NOT NULL,
    action_type    TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('started', 'finished')),
    started_at     REAL NOT NULL,
    finished_at    REAL,
    report         BLOB,
    outbox         BLOB,
    outbox_attempt TEXT,
    acked_at       REAL,
    answered_by    TEXT,
    UNIQUE (replay_id, action_id)
);
CREATE INDEX actions_state ON actions (state);
"""

_COLUMNS = ("action_id, attempt_id, replay_id, session_id, machine_id, action_type, state, "
            "started_at, finished_at, report, outbox, outbox_attempt, acked_at, answered_by")
_EXECUTED = "answered_by IS NULL"


class LedgerLocked(RuntimeError):
    """Another live process holds this ledger."""


class LedgerVersionError(RuntimeError):
    """The ledger file has another schema version than this code (e.g. an older agent's)."""


class LedgerConflict(ValueError):
    """``begin`` for a ``(replay_id, action_id)`` the ledger already holds (the caller must
    look it up first)."""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One row, keyed by ``(replay_id, action_id)``. ``report`` is the first report sent;
    ``outbox`` the one awaiting an ack. ``answered_by``: set on an alias, the action id (same
    replay) whose execution answers for this one; an alias has no ``report`` of its own."""

    action_id: str
    attempt_id: str
    replay_id: str
    session_id: str
    machine_id: str
    action_type: str
    state: State
    started_at: float
    finished_at: float | None
    report: bytes | None
    outbox: bytes | None
    outbox_attempt: str | None
    acked_at: float | None
    answered_by: str | None = None

    @property
    def finished(self) -> bool:
        return self.state == "finished"

    @property
    def key(self) -> tuple[str, str]:
        return self.replay_id, self.action_id


@dataclass(frozen=True, slots=True)
class OutboxReport:
    """A report encoded once, as the outbox holds it and the agent sends it until acked:
    the action and attempt it answers, its envelope id (the same across retries) and its
    wire bytes."""

    replay_id: str
    action_id: str
    attempt_id: str
    msg_id: str
    data: bytes


def encode_report(report: ActionReport, msg_id: str | None = None) -> OutboxReport:
    """``report`` encoded, in a new envelope unless ``msg_id`` is given."""
    msg_id = msg_id or new_id()
    return OutboxReport(report.replay_id, report.action_id, report.attempt_id, msg_id,
                        encode(report, msg_id))


def outbox_report(entry: LedgerEntry) -> OutboxReport:
    """The report waiting in ``entry``'s outbox (after a restart), as it was first sent.

    Raises ``ValueError`` (a :class:`~messages.codec.MessageError` among them) when the
    bytes are not a report, and ``LookupError`` when the outbox is empty.
    """
    if entry.outbox is None or entry.outbox_attempt is None:
        raise LookupError(f"no report waits in the outbox of {entry.action_id!r}")
    msg_id, _report = decode_report(entry.outbox)
    return OutboxReport(entry.replay_id, entry.action_id, entry.outbox_attempt, msg_id,
                        entry.outbox)


def decode_report(data: bytes) -> tuple[str, ActionReport]:
    """``(envelope id, report)`` of bytes made by :func:`encode_report`."""
    envelope = decode(data, limit=len(data) + 1)
    if not isinstance(envelope.body, ActionReport):
        raise ValueError(f"ledger holds a {envelope.type!r}, not an action report")
    return envelope.id, envelope.body


class Ledger:
    """The ledger file of one agent. Use it from one thread only (the agent's main loop).

    Opening it takes an exclusive lock (``<path>.lock``) held until :meth:`close` or the
    process ends: two agents on one ledger would each think the other's actions unstarted.
    """

    def __init__(self, path: str | Path, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.path = Path(path)
        self.capacity = capacity
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.path.with_name(self.path.name + ".lock"))
        try:
            self._db = self._open()
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _open(self) -> sqlite3.Connection:
        # FULL: a commit returns only once the WAL is fsync'ed. NORMAL would be 4x faster but
        # may lose the last commits on power loss, i.e. a *started* mark. The checkpoint
        # (power cuts, docs/durability.md): a predecessor killed between a commit's write
        # and its fsync left rows we are about to act on; it fsyncs them first.
        return sqlite_store.connect(self.path, synchronous="FULL",
                                    setup=lambda db: _check_schema(db, self.path),
                                    checkpoint=True)

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return sqlite_store.transaction(self._db)

    def begin(self, dispatch: DispatchAction, now: float | None = None) -> None:
        """Mark ``dispatch``'s action started, and each id it supersedes an alias of it, in
        one transaction; durable on return. Evicts old finished rows.

        Raises :class:`LedgerConflict` if one of those ``(replay_id, action_id)`` is already
        there (the caller must look them up first).
        """
        now = time.time() if now is None else now
        action = dispatch.action
        aliases = [a for a in dict.fromkeys(dispatch.supersedes) if a != action.action_id]
        row = (dispatch.replay_id, dispatch.attempt_id, dispatch.session_id,
               dispatch.machine_id, action.type, now)
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO actions (action_id, replay_id, attempt_id, session_id,"
                    " machine_id, action_type, state, started_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, 'started', ?)", (action.action_id, *row))
                db.executemany(
                    "INSERT INTO actions (action_id, replay_id, attempt_id, session_id,"
                    " machine_id, action_type, state, started_at, answered_by)"
                    " VALUES (?, ?, ?, ?, ?, ?, 'finished', ?, ?)",
                    [(alias, *row, action.action_id) for alias in aliases])
                self._evict(db)
        except sqlite3.IntegrityError:
            raise LedgerConflict(f"action {action.action_id!r} of replay"
                                 f" {dispatch.replay_id!r} or an id it supersedes"
                                 f" ({', '.join(aliases) or 'none'}) is already in the"
                                 " ledger") from None

    def _evict(self, db: sqlite3.Connection) -> None:
        (count,) = db.execute(f"SELECT COUNT(*) FROM actions WHERE {_EXECUTED}").fetchone()
        excess = int(count) - self.capacity
        if excess <= 0:
            return
        victims = db.execute(
            f"SELECT seq, replay_id, action_id FROM actions a WHERE {_EXECUTED}"
            " AND state = 'finished' AND outbox IS NULL AND NOT EXISTS (SELECT 1 FROM actions"
            " b WHERE b.replay_id = a.replay_id AND b.answered_by = a.action_id"
            " AND b.outbox IS NOT NULL) ORDER BY seq LIMIT ?", (excess,)).fetchall()
        db.executemany("DELETE FROM actions WHERE replay_id = ? AND answered_by = ?",
                       [(replay_id, action_id) for _seq, replay_id, action_id in victims])
        db.executemany("DELETE FROM actions WHERE seq = ?", [(v[0],) for v in victims])

    def finish(self, replay_id: str, action_id: str, report: ActionReport,
               now: float | None = None) -> OutboxReport:
        """Mark the action finished with ``report``, which also goes to the outbox; durable
        on return. Returns the report as recorded, to send as it is."""
        if (report.replay_id, report.action_id) != (replay_id, action_id):
            raise ValueError(f"the report of {report.action_id!r} (replay"
                             f" {report.replay_id!r}) cannot finish {action_id!r}"
                             f" (replay {replay_id!r})")
        now = time.time() if now is None else now
        sent = encode_report(report)
        with self._tx() as db:
            cur = db.execute(
                "UPDATE actions SET state = 'finished', finished_at = ?, report = ?,"
                " outbox = ?, outbox_attempt = ?, acked_at = NULL"
                f" WHERE replay_id = ? AND action_id = ? AND {_EXECUTED}",
                (now, sent.data, sent.data, report.attempt_id, replay_id, action_id))
            if cur.rowcount != 1:
                raise KeyError(f"action {action_id!r} of replay {replay_id!r} is not in the"
                               " ledger (or is an alias)")
        return sent

    def queue_report(self, report: ActionReport, answered_by: str | None = None,
                     now: float | None = None) -> OutboxReport:
        """Put ``report`` (e.g. re-addressed to a newer attempt) in the outbox of its action,
        the row of its ``(replay_id, action_id)``; durable on return, returned as recorded.

        It replaces an unacked older one: only the newest attempt is current for the
        dispatcher, so an older copy would only be recorded as stale. ``answered_by``: the
        report is another action's outcome (same step); the row is made an alias of that
        action if it is not in the ledger yet.
        """
        now = time.time() if now is None else now
        sent = encode_report(report)
        with self._tx() as db:
            if answered_by is not None:
                db.execute(
                    "INSERT OR IGNORE INTO actions (replay_id, action_id, attempt_id,"
                    " session_id, machine_id, action_type, state, started_at, answered_by)"
                    " SELECT replay_id, ?, ?, ?, ?, action_type, 'finished', ?, action_id"
                    " FROM actions WHERE replay_id = ? AND action_id = ?",
                    (report.action_id, report.attempt_id, report.session_id,
                     report.machine_id, now, report.replay_id, answered_by))
            cur = db.execute(
                "UPDATE actions SET outbox = ?, outbox_attempt = ?, acked_at = NULL"
                " WHERE replay_id = ? AND action_id = ? AND state = 'finished'",
                (sent.data, report.attempt_id, report.replay_id, report.action_id))
            if cur.rowcount != 1:
                raise KeyError(f"action {report.action_id!r} of replay {report.replay_id!r}"
                               " is not finished in the ledger")
        return sent

    def acked(self, replay_id: str, action_id: str, attempt_id: str,
              now: float | None = None) -> bool:
        """The dispatcher recorded the report for ``attempt_id``: empty the outbox.

        False (and nothing changes) when the outbox holds another attempt's report.
        """
        now = time.time() if now is None else now
        with self._tx() as db:
            cur = db.execute(
                "UPDATE actions SET outbox = NULL, acked_at = ?"
                " WHERE replay_id = ? AND action_id = ? AND outbox_attempt = ?"
                " AND outbox IS NOT NULL",
                (now, replay_id, action_id, attempt_id))
            return cur.rowcount == 1

    def forget_unfinished(self, replay_id: str, action_id: str) -> bool:
        """Remove a row marked started and never finished (and its aliases), so that the
        next dispatch of that action runs it: for an action without input, which a restart
        cut (serve.Intake.after_restart). False if there was no such row."""
        with self._tx() as db:
            cur = db.execute("DELETE FROM actions WHERE replay_id = ? AND action_id = ?"
                             f" AND state = 'started' AND {_EXECUTED}", (replay_id, action_id))
            if cur.rowcount:
                db.execute("DELETE FROM actions WHERE replay_id = ? AND answered_by = ?",
                           (replay_id, action_id))
            return cur.rowcount == 1

    def lookup(self, replay_id: str, action_id: str) -> LedgerEntry | None:
        """The row of ``action_id`` in ``replay_id``, if the ledger holds it."""
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM actions WHERE replay_id = ? AND action_id = ?",
            (replay_id, action_id)).fetchone()
        return None if row is None else LedgerEntry(*row)

    def resolve(self, replay_id: str, action_id: str) -> LedgerEntry | None:
        """The row of the execution that answers for ``action_id``: its own, or, for an
        alias, the row it is an alias of."""
        entry = self.lookup(replay_id, action_id)
        if entry is None or entry.answered_by is None:
            return entry
        return self.lookup(replay_id, entry.answered_by)

    def unfinished(self) -> list[LedgerEntry]:
        """Rows marked started and never finished, oldest first."""
        return self._select("state = 'started'")

    def unacked(self) -> list[LedgerEntry]:
        """Rows whose outbox still holds a report, oldest first."""
        return self._select("outbox IS NOT NULL")

    def _select(self, where: str) -> list[LedgerEntry]:
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM actions WHERE {where} ORDER BY seq")
        return [LedgerEntry(*row) for row in rows]

    def __len__(self) -> int:
        """Executed actions held (aliases not counted: they go with their execution)."""
        (count,) = self._db.execute(f"SELECT COUNT(*) FROM actions WHERE {_EXECUTED}").fetchone()
        return cast(int, count)

    def close(self) -> None:
        self._db.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _check_schema(db: sqlite3.Connection, path: Path) -> None:
    """Create the schema in a new (empty) file, or check an existing file's version."""
    with sqlite_store.transaction(db):  # a new file is created and versioned in one commit
        (version,) = db.execute("PRAGMA user_version").fetchone()
        (tables,) = db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        if version == 0 and tables == 0:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version == 2:  # same rows, none an alias: upgraded in this transaction
            db.execute("ALTER TABLE actions ADD COLUMN answered_by TEXT")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version != SCHEMA_VERSION:
            found = "an unversioned (version 1)" if version == 0 else f"a version {version}"
            raise LedgerVersionError(
                f"{path} is {found} ledger, this agent reads versions 2 and {SCHEMA_VERSION}"
                " only (keyed by replay and action): let the agent that wrote it finish its"
                " reports, or move the file away to start afresh (its actions could then"
                " run twice)")


def _lock(path: Path) -> int:
    """An exclusive lock on ``path``, held as long as the returned descriptor is open (the OS
    drops it when the process dies, kill -9 included). filelock's descriptor lock: flock on
    POSIX, LockFileEx on byte 0 on Windows (no fcntl there)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        locked = filelock.lock_descriptor(fd, blocking=False)
    except BaseException:
        os.close(fd)
        raise
    if not locked:
        holder = _read_holder(fd)
        os.close(fd)
        raise LedgerLocked(f"{path.parent} is in use by another agent (pid {holder}):"
                           " two agents on one ledger would break exactly-once")
    # The pid goes after byte 0, the byte Windows locks (another agent could not read it).
    os.lseek(fd, 1, os.SEEK_SET)
    os.write(fd, str(os.getpid()).encode().ljust(_PID_WIDTH))
    return fd


_PID_WIDTH = 20


def _read_holder(fd: int) -> str:
    try:
        os.lseek(fd, 1, os.SEEK_SET)
        return os.read(fd, _PID_WIDTH).decode(errors="replace").strip() or "?"
    except OSError:
        return "?"

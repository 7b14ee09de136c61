"""The console's own database, ``<data_dir>/console.sqlite3``: operator accounts, sign-in
sessions, recent failed sign-ins, and the console's audit outbox.

Only the console and the ``run.py accounts`` command open it (no actor reads another's
database, docs/architecture.md): the accounts belong to the console, which alone decides who is at
it. Every change of an account and every sign-in event is committed in the same transaction
as its audit record (the outbox of audit_outbox/store.py); the console's audit link
sends the outbox to audit_log, so a change made with the tree stopped reaches the trail at
its next start. The file is made owner-only (0600): it holds the password hashes.

A session is known by the SHA-256 of its cookie value: a copy of the database opens no
session. One connection, used under a lock (the console's routes may run on threads).
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from audit_outbox import store as audit_outbox
from console.accounts import Account, Failures
from messages.replay import Role
from runtime import sqlite_store

DB_NAME = "console.sqlite3"
SOURCE = "console"
"""The audit records' source."""
ENDED_KEPT_S = 24 * 3600.0
"""Ended sessions are kept this long (to answer ``session_expired`` rather than nothing)."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (
    name TEXT PRIMARY KEY, role TEXT NOT NULL, password_hash TEXT NOT NULL,
    disabled INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id_hash TEXT PRIMARY KEY, account TEXT NOT NULL, client TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, ended_at REAL, end_reason TEXT);
CREATE TABLE IF NOT EXISTS login_failures (scope TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS login_failures_scope ON login_failures (scope, at);
"""

SessionState = Literal["valid", "expired", "ended", "unknown", "account_disabled"]


@dataclass(frozen=True, slots=True)
class Session:
    """A session looked up by its cookie: its state, and its account when there is one."""

    state: SessionState
    account: Account | None = None
    id_hash: str = ""
    expires_at: float = 0.0
    directory_dn: str | None = None
    """A person of the directory's (their role is read there again at each request)."""


def session_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def short(id_hash: str) -> str:
    """The part of a session's hash the audit trail shows (enough to tell sessions apart)."""
    return id_hash[:12]


def _create(db: sqlite3.Connection) -> None:
    db.executescript(_SCHEMA)  # idempotent: IF NOT EXISTS
    # A session of a person of the directory (console/directory.py) keeps their entry's DN:
    # a column added to the databases made before the directory existed.
    if "directory_dn" not in {r[1] for r in db.execute("PRAGMA table_info(sessions)")}:
        db.execute("ALTER TABLE sessions ADD COLUMN directory_dn TEXT")
    audit_outbox.create(db)


class AccountStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._db = sqlite_store.connect(self.path, synchronous="FULL", setup=_create,
                                        owner_only=True, threads=True)

    @classmethod
    def in_dir(cls, data_dir: str | Path) -> AccountStore:
        return cls(Path(data_dir) / DB_NAME)

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock, sqlite_store.transaction(self._db) as db:
            yield db

    def _audit(self, kind: str, at: float, data: dict[str, Any]) -> None:
        audit_outbox.insert(self._db, SOURCE, kind, at, data)

    # Accounts ---------------------------------------------------------------------------

    def get(self, name: str) -> Account | None:
        with self._lock:
            row = self._db.execute(
                "SELECT name, role, password_hash, disabled, created_at FROM accounts "
                "WHERE name = ?", (name,)).fetchone()
        return _account(row) if row else None

    def accounts(self) -> list[Account]:
        with self._lock:
            rows = self._db.execute(
                "SELECT name, role, password_hash, disabled, created_at FROM accounts "
                "ORDER BY name").fetchall()
        return [_account(r) for r in rows]

    def add(self, name: str, role: Role, password_hash: str, now: float,
            by: dict[str, Any]) -> None:
        """A new account (ValueError if the name is taken), and its audit record."""
        with self._tx() as db:
            if db.execute("SELECT 1 FROM accounts WHERE name = ?", (name,)).fetchone():
                raise ValueError(f"the account {name!r} already exists")
            db.execute("INSERT INTO accounts VALUES (?, ?, ?, 0, ?, ?)",
                       (name, role, password_hash, now, now))
            self._audit("account_added", now, {"account": name, "role": role, **by})

    def change(self, name: str, now: float, by: dict[str, Any], *, role: Role | None = None,
               password_hash: str | None = None, disabled: bool | None = None) -> None:
        """Change an account (LookupError if unknown) and record it; disabling it, or a new
        password, also ends its open sessions."""
        with self._tx() as db:
            found = db.execute("SELECT role, disabled FROM accounts WHERE name = ?",
                               (name,)).fetchone()
            if found is None:
                raise LookupError(f"no account {name!r}")
            if role is not None:
                db.execute("UPDATE accounts SET role = ?, updated_at = ? WHERE name = ?",
                           (role, now, name))
                self._audit("account_role_changed", now,
                            {"account": name, "role": role, "previous_role": found[0], **by})
            if password_hash is not None:
                db.execute("UPDATE accounts SET password_hash = ?, updated_at = ? "
                           "WHERE name = ?", (password_hash, now, name))
                self._audit("account_password_changed", now, {"account": name, **by})
            if disabled is not None:
                db.execute("UPDATE accounts SET disabled = ?, updated_at = ? WHERE name = ?",
                           (int(disabled), now, name))
                self._audit("account_disabled" if disabled else "account_enabled", now,
                            {"account": name, **by})
            if disabled or password_hash is not None:
                ended = db.execute(
                    "UPDATE sessions SET ended_at = ?, end_reason = 'account_changed' "
                    "WHERE account = ? AND ended_at IS NULL", (now, name)).rowcount
                if ended:
                    self._audit("sessions_ended", now,
                                {"account": name, "sessions": ended,
                                 "why": "account disabled" if disabled else "new password"})

    def rehash(self, name: str, password_hash: str, now: float) -> None:
        """A stronger hash of the same password (no audit record: nothing changed)."""
        with self._tx() as db:
            db.execute("UPDATE accounts SET password_hash = ?, updated_at = ? WHERE name = ?",
                       (password_hash, now, name))

    # Failed sign-ins --------------------------------------------------------------------

    def failures(self, scope: str, since: float) -> Failures:
        with self._lock:
            count, oldest = self._db.execute(
                "SELECT count(*), min(at) FROM login_failures WHERE scope = ? AND at >= ?",
                (scope, since)).fetchone()
        return Failures(int(count), oldest)

    def attempt(self, scopes: list[str], now: float, window_s: float) -> list[int]:
        """Count a sign-in as failed under each scope *before* its password is checked, so
        that attempts sent together cannot all pass the limit; the row ids, which a good
        password takes back (:meth:`open_session`)."""
        with self._tx() as db:
            db.execute("DELETE FROM login_failures WHERE at < ?", (now - window_s,))
            return [int(db.execute("INSERT INTO login_failures VALUES (?, ?)",
                                   (s, now)).lastrowid or 0) for s in scopes]

    def record(self, kind: str, now: float, data: dict[str, Any]) -> None:
        """An audit record of the console (a refusal, a limit reached...)."""
        with self._tx():
            self._audit(kind, now, data)

    # Sessions ---------------------------------------------------------------------------

    def open_session(self, id_hash: str, account: Account, client: str, now: float,
                     expires_at: float, forget_scope: str, attempt: list[int],
                     directory_dn: str | None = None) -> None:
        """A new session after a good password: the account's failures and this attempt's
        rows are forgotten, and the sign-in recorded. ``directory_dn``: a person of the
        directory, with no local account (``account`` then says their name and role at
        sign-in)."""
        with self._tx() as db:
            db.execute("DELETE FROM login_failures WHERE scope = ?", (forget_scope,))
            db.executemany("DELETE FROM login_failures WHERE rowid = ?",
                           [(i,) for i in attempt])
            db.execute("DELETE FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?",
                       (now - ENDED_KEPT_S,))
            db.execute("INSERT INTO sessions (id_hash, account, client, created_at, expires_at, "
                       "directory_dn) VALUES (?, ?, ?, ?, ?, ?)",
                       (id_hash, account.name, client, now, expires_at, directory_dn))
            self._audit("login_succeeded", now, {
                "account": account.name, "role": account.role, "client": client,
                "session": short(id_hash), "expires_at": expires_at,
                **({"origin": "directory", "dn": directory_dn} if directory_dn else {})})

    def session(self, id_hash: str, now: float) -> Session:
        """The session of a cookie now; an expiry seen for the first time is recorded."""
        with self._lock:
            row = self._db.execute(
                "SELECT s.expires_at, s.ended_at, s.end_reason, a.name, a.role, "
                "a.password_hash, a.disabled, a.created_at, s.directory_dn, s.account, "
                "s.created_at FROM sessions s LEFT JOIN accounts a "
                "ON a.name = s.account AND s.directory_dn IS NULL WHERE s.id_hash = ?",
                (id_hash,)).fetchone()
            if row is None:
                return Session("unknown")
            expires_at, ended_at, end_reason, dn = row[0], row[1], row[2], row[8]
            account = _account(row[3:8]) if row[3] is not None else None
            if dn is not None:  # the directory says the role, at each request (auth.py)
                account = Account(name=row[9], role="viewer", password_hash="",
                                  disabled=False, created_at=row[10])
            if ended_at is not None:
                return Session("expired" if end_reason == "expired" else "ended", account,
                               id_hash, expires_at, dn)
            if account is None:
                return Session("ended", None, id_hash, expires_at)
            if now >= expires_at:
                with self._tx() as db:
                    db.execute("UPDATE sessions SET ended_at = ?, end_reason = 'expired' "
                               "WHERE id_hash = ? AND ended_at IS NULL", (now, id_hash))
                    self._audit("session_expired", now, {
                        "account": account.name, "session": short(id_hash),
                        "expires_at": expires_at})
                return Session("expired", account, id_hash, expires_at, dn)
            if account.disabled:
                return Session("account_disabled", account, id_hash, expires_at)
            return Session("valid", account, id_hash, expires_at, dn)

    def end_directory_session(self, id_hash: str, now: float, why: str,
                              data: dict[str, Any]) -> None:
        """A directory person's session ends because the directory no longer lets them in
        (``why``: removed, disabled, no group), recorded with ``data``."""
        with self._tx() as db:
            if db.execute("UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id_hash = ? "
                          "AND ended_at IS NULL", (now, why, id_hash)).rowcount:
                self._audit("session_ended_by_directory", now,
                            {**data, "session": short(id_hash), "why": why})

    def end_session(self, id_hash: str, now: float) -> bool:
        """Sign out: the session ends (recorded); False if it was not open."""
        with self._tx() as db:
            row = db.execute("SELECT account FROM sessions WHERE id_hash = ? AND "
                             "ended_at IS NULL", (id_hash,)).fetchone()
            if row is None:
                return False
            db.execute("UPDATE sessions SET ended_at = ?, end_reason = 'logout' "
                       "WHERE id_hash = ?", (now, id_hash))
            self._audit("logout", now, {"account": row[0], "session": short(id_hash)})
        return True


def _account(row: Any) -> Account:
    name, role, password_hash, disabled, created_at = row
    return Account(name=name, role=role, password_hash=password_hash, disabled=bool(disabled),
                   created_at=created_at)

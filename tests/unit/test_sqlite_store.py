"""The one way the stores open and write SQLite (runtime/sqlite_store.py): WAL at the level
the store chose, immediate transactions that are all or nothing, a failed commit rolled back,
ids no rollback can reuse. Real files, real SQLite; the power cut itself is in
tests/integration/test_powerfs.py."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from runtime import sqlite_store


def _table(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")


def test_a_store_is_opened_in_wal_at_its_level_with_its_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "new" / "s.sqlite3"  # its folder too is made
    for level, number in (("FULL", 2), ("NORMAL", 1)):
        db = sqlite_store.connect(path, synchronous=level, busy_timeout_s=7.5, setup=_table)
        try:
            assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            assert db.execute("PRAGMA synchronous").fetchone() == (number,)
            assert db.execute("PRAGMA busy_timeout").fetchone() == (7500,)
            assert db.isolation_level is None  # autocommit outside transaction()
        finally:
            db.close()


def test_a_failed_setup_closes_the_connection_and_raises(tmp_path: Path) -> None:
    seen: list[sqlite3.Connection] = []

    def broken(db: sqlite3.Connection) -> None:
        seen.append(db)
        raise RuntimeError("unknown schema version")

    with pytest.raises(RuntimeError, match="unknown schema version"):
        sqlite_store.connect(tmp_path / "s.sqlite3", synchronous="FULL", setup=broken)
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        seen[0].execute("SELECT 1")


def test_owner_only_files_are_made_0600_from_the_start(tmp_path: Path) -> None:
    db = sqlite_store.connect(tmp_path / "secret.sqlite3", synchronous="FULL", setup=_table,
                              owner_only=True)
    db.execute("INSERT INTO t VALUES (1, 'x')")
    for name in ("secret.sqlite3", "secret.sqlite3-wal"):  # SQLite's own files follow it
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    db.close()


def test_a_transaction_is_all_or_nothing(tmp_path: Path) -> None:
    db = sqlite_store.connect(tmp_path / "s.sqlite3", synchronous="FULL", setup=_table)
    with sqlite_store.transaction(db) as tx:
        tx.execute("INSERT INTO t VALUES (1, 'kept')")
    with pytest.raises(ValueError), sqlite_store.transaction(db) as tx:
        tx.execute("INSERT INTO t VALUES (2, 'undone')")
        raise ValueError("bad input half-way")
    assert not db.in_transaction
    assert db.execute("SELECT id FROM t").fetchall() == [(1,)]


def test_a_transaction_holds_the_write_lock_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    db = sqlite_store.connect(path, synchronous="FULL", setup=_table)
    other = sqlite_store.connect(path, synchronous="FULL", busy_timeout_s=0.0)
    # No statement yet in the transaction: the lock is already taken.
    with sqlite_store.transaction(db), pytest.raises(sqlite3.OperationalError, match="locked"):
        other.execute("INSERT INTO t VALUES (9, 'other writer')")
    other.execute("INSERT INTO t VALUES (9, 'other writer')")  # free again once committed
    other.close()
    db.close()


def test_an_error_that_sqlite_rolled_back_itself_is_the_one_raised(tmp_path: Path) -> None:
    db = sqlite_store.connect(tmp_path / "s.sqlite3", synchronous="FULL", setup=_table)
    db.execute("INSERT INTO t VALUES (1, 'first')")
    with pytest.raises(sqlite3.IntegrityError), sqlite_store.transaction(db) as tx:
        tx.execute("INSERT INTO t VALUES (2, 'second')")
        tx.execute("INSERT OR ROLLBACK INTO t VALUES (1, 'again')")  # ends the transaction
    assert not db.in_transaction
    assert db.execute("SELECT id FROM t").fetchall() == [(1,)]


def _deferred_keys(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA foreign_keys=ON")
    db.execute("CREATE TABLE IF NOT EXISTS parent (id INTEGER PRIMARY KEY)")
    db.execute("CREATE TABLE IF NOT EXISTS child (id INTEGER PRIMARY KEY, parent INTEGER"
               " REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")


def test_a_failed_commit_is_rolled_back_and_the_next_transaction_works(
        tmp_path: Path) -> None:
    db = sqlite_store.connect(tmp_path / "s.sqlite3", synchronous="FULL",
                              setup=_deferred_keys)
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"), \
            sqlite_store.transaction(db) as tx:
        tx.execute("INSERT INTO parent VALUES (1)")
        tx.execute("INSERT INTO child VALUES (1, 42)")  # checked at COMMIT, which fails
    assert not db.in_transaction  # SQLite would have kept it open: nothing half-applied
    assert db.execute("SELECT count(*) FROM parent").fetchone() == (0,)
    with sqlite_store.transaction(db) as tx:
        tx.execute("INSERT INTO parent VALUES (1)")
        tx.execute("INSERT INTO child VALUES (1, 1)")
    assert db.execute("SELECT count(*) FROM child").fetchone() == (1,)


def test_begin_commit_and_rollback_span_calls(tmp_path: Path) -> None:
    """The dispatcher's turn: begun by its first decision, committed at its end."""
    db = sqlite_store.connect(tmp_path / "s.sqlite3", synchronous="FULL", setup=_table)
    sqlite_store.begin(db)
    db.execute("INSERT INTO t VALUES (1, 'a')")
    db.execute("INSERT INTO t VALUES (2, 'b')")
    sqlite_store.commit(db)
    sqlite_store.begin(db)
    db.execute("INSERT INTO t VALUES (3, 'c')")
    sqlite_store.rollback(db)
    sqlite_store.rollback(db)  # nothing open: nothing to do
    assert db.execute("SELECT id FROM t").fetchall() == [(1,), (2,)]


def _outbox(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY AUTOINCREMENT)")


def test_each_epoch_starts_its_ids_above_every_earlier_one(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    e = 1 << sqlite_store.EPOCH_BITS
    db = sqlite_store.connect(path, synchronous="FULL", setup=_outbox)
    assert sqlite_store.start_epoch(db, "outbox") == 1
    assert db.execute("INSERT INTO outbox DEFAULT VALUES").lastrowid == e + 1
    sqlite_store.begin(db)
    db.execute("INSERT INTO outbox DEFAULT VALUES")  # e + 2, rolled back (as by a cut)
    sqlite_store.rollback(db)
    db.close()
    db = sqlite_store.connect(path, synchronous="FULL", setup=_outbox)
    assert sqlite_store.start_epoch(db, "outbox") == 2
    assert db.execute("INSERT INTO outbox DEFAULT VALUES").lastrowid == 2 * e + 1
    db.close()

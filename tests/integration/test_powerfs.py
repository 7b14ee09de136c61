"""The power-loss harness itself (tests/powerfs.py), checked before anything relies on it: a
failure of the power-loss tests must be the project's, not the filesystem's.

SQLite in WAL mode, a writer process killed at a random moment then the cut: with
``synchronous=FULL`` every row whose COMMIT returned is there; with ``OFF`` rows are lost;
the database is never corrupt. And the rules it models for files and directory names.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.durability import write_atomic
from tests.conftest import ROOT
from tests.powerfs import Disk

WRITER = textwrap.dedent("""
    import sqlite3, sys
    path, mode = sys.argv[1], sys.argv[2]
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, pad BLOB)")
    (start,) = db.execute("SELECT coalesce(max(id), 0) FROM t").fetchone()
    db.execute(f"PRAGMA synchronous={mode}")
    print("ready", flush=True)
    i = start
    while True:
        i += 1
        db.execute("INSERT INTO t VALUES (?, randomblob(3000))", (i,))  # COMMIT returned
        print(i, flush=True)
""")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    d = Disk(tmp_path / "disk")
    try:
        yield d
    finally:
        d.close()


def write_then_cut(disk: Disk, db: Path, mode: str, run_s: float) -> list[int]:
    """Rows the writer saw committed before it was killed (as a cut kills), then the cut."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db), mode], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    committed: list[int] = []
    deadline = time.monotonic() + run_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed.append(int(line))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    committed += [int(line) for line in proc.stdout.read().split()]
    proc.stdout.close()
    disk.cut()
    return committed


def rows(db: Path) -> set[int]:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return {i for (i,) in conn.execute("SELECT id FROM t")}
    finally:
        conn.close()


def test_sqlite_full_keeps_every_committed_row_across_cuts(disk: Disk) -> None:
    db = disk.mkdir("data") / "t.sqlite3"
    rng = random.Random()
    kept: set[int] = set()
    for _ in range(4):
        committed = write_then_cut(disk, db, "FULL", rng.uniform(0.2, 1.0))
        assert committed, "the writer committed nothing"
        now = rows(db)
        assert kept | set(committed) <= now, "a committed row was lost"
        kept = now


def test_sqlite_off_loses_rows_at_a_cut_and_stays_consistent(disk: Disk) -> None:
    db = disk.mkdir("data") / "t.sqlite3"
    committed = write_then_cut(disk, db, "OFF", 0.5)
    stats = disk.stats()
    survived = rows(db)
    assert len(committed) > 10 and stats["lost_bytes"] > 0
    assert survived < set(committed), "nothing unsynced was dropped: the cut did not cut"


def test_names_are_durable_only_once_their_directory_is_synced(disk: Disk) -> None:
    data = disk.mkdir("data")
    anchor = disk.mkdir("data/audit") / "anchor.json"  # another directory: its own fsync
    synced_name = data / "synced-name"
    lost_name = data / "lost-name"
    for path in (synced_name, lost_name):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"content")
        os.fsync(fd)
        os.close(fd)
    fd = os.open(data, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)  # names durable: synced-name and lost-name both
    os.close(fd)
    os.rename(lost_name, data / "renamed")  # not synced: undone by the cut
    (data / "unsynced-data").write_bytes(b"x")  # neither data nor name synced
    unsynced = data / "synced-name"
    unsynced.write_bytes(b"overwritten, never synced")
    write_atomic(anchor, b"old")
    write_atomic(anchor, b"new")  # fsync'ed, renamed, directory fsync'ed
    stats = disk.cut()
    assert sorted(p.name for p in data.iterdir()) == ["audit", "lost-name", "synced-name"]
    assert [p.name for p in anchor.parent.iterdir()] == ["anchor.json"]
    assert synced_name.read_bytes() == b"content"  # the last fsync'ed content
    assert anchor.read_bytes() == b"new"
    assert stats["cuts"] == 1 and stats["lost_names"] > 0

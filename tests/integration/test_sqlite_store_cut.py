"""A store opened and written through runtime/sqlite_store.py keeps, across a power cut,
its file (made by that open) and every transaction whose commit returned: the guarantee
every store of the project builds on (docs/durability.md), on PowerFS (tests/powerfs.py)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.powerfs import Disk

WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from runtime import sqlite_store

    def setup(db):
        db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, pad BLOB)")

    db = sqlite_store.connect(Path(sys.argv[1]), synchronous="FULL", setup=setup)
    i = 0
    while True:
        i += 1
        with sqlite_store.transaction(db) as tx:  # two rows, one commit
            tx.execute("INSERT INTO t VALUES (?, randomblob(3000))", (2 * i,))
            tx.execute("INSERT INTO t VALUES (?, randomblob(3000))", (2 * i + 1,))
        print(i, flush=True)  # committed
""")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    with Disk(tmp_path / "disk") as d:  # unmounted however the test ends
        yield d


@pytest.mark.parametrize("commits", [1, 200])
def test_a_new_store_and_its_committed_transactions_survive_a_cut(disk: Disk,
                                                                  commits: int) -> None:
    db_path = disk.mkdir("data") / "store.sqlite3"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db_path)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    committed = [int(proc.stdout.readline()) for _ in range(commits)]
    proc.send_signal(signal.SIGKILL)  # the power goes: the process first, then the disk
    proc.wait()
    committed += [int(line) for line in proc.stdout.read().split()]
    proc.stdout.close()
    stats = disk.cut()
    assert stats["cuts"] == 1
    conn = sqlite3.connect(db_path)  # the file made by the open is still there
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        ids = {i for (i,) in conn.execute("SELECT id FROM t")}
    finally:
        conn.close()
    wanted = {row for i in committed for row in (2 * i, 2 * i + 1)}
    assert wanted <= ids, "a committed transaction was lost"
    assert all((i + 1 if i % 2 == 0 else i - 1) in ids for i in ids), "half a transaction"

"""A real, throwaway PostgreSQL server for the tests that keep the dispatcher's state there.

Debian's binaries (``postgresql``, installed by scripts/test): ``initdb`` makes a cluster on
a free port, loopback only, no password, ``fsync`` and ``synchronous_commit`` on; it is
stopped and removed at teardown, also when the test fails (its server log is then copied
into the test's folder). Tests are skipped, saying why, only where the binaries are absent.

As root (these machines, CI) the server runs as the ``postgres`` user, which initdb and
postgres require; its folder is then a private one of that user's in the system's temporary
directory, beside the test's: pytest's own temporary root is private to root (0700) and is
made so again by every pytest session that starts, so that user could not reach a folder
inside it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

USER = "lea"


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian's layout), or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                   else 0)
    return found[-1].parent if found else None


class Cluster:
    """One PostgreSQL server of our own: :meth:`start`, :meth:`stop`, :meth:`url`."""

    def __init__(self, log_dir: Path) -> None:
        bindir = pg_bin()
        if bindir is None:
            raise FileNotFoundError("no PostgreSQL binaries under /usr/lib/postgresql")
        self.bin = bindir
        from tests.conftest import free_port  # (conftest imports the fixtures below)

        self.log_dir = log_dir
        self.port = free_port()
        self._owner: dict[str, Any] = {}
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            self.dir = Path(tempfile.mkdtemp(prefix="lea-pg-"))
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._owner = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        else:
            self.dir = Path(tempfile.mkdtemp(prefix="pg-", dir=log_dir))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", USER, "-N",
                  "-E", "UTF8", "--locale", "C")

    def _run(self, tool: str, *args: str) -> None:
        proc = subprocess.run([str(self.bin / tool), *args], cwd=self.dir,
                              capture_output=True, timeout=120, **self._owner)
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} failed: {proc.stdout.decode()}{proc.stderr.decode()}")

    def start(self) -> None:
        """Start the server (waits until it accepts connections)."""
        # The keepalives docs/operations.md asks of a server shared by several dispatchers
        # ("Several dispatchers"): a client cut off loses its session, and its locks, in
        # seconds.
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                   "-c fsync=on -c synchronous_commit=on -c tcp_keepalives_idle=5 "
                   "-c tcp_keepalives_interval=2 -c tcp_keepalives_count=3 "
                   "-c tcp_user_timeout=10000")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w",
                  "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` ends every connection (their open transactions are
        rolled back), ``immediate`` is a crash (recovery at the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url(name)

    def close(self) -> None:
        """Stop (immediately) and remove everything; the server log goes to ``log_dir``."""
        try:
            if self.running():
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    self.stop("immediate")
        finally:
            with contextlib.suppress(OSError):
                shutil.copyfile(self.log, self.log_dir / f"postgres-{self.port}.log")
            shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def cluster(log_dir: Path) -> Iterator[Cluster]:
    """A started cluster, removed on exit; skips the test where PostgreSQL is absent."""
    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (Debian's postgresql package; scripts/test "
                    "installs it)")
    c = Cluster(log_dir)
    try:
        c.start()
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def pg_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One server for a session's tests that only need a database each (:func:`pg_url`)."""
    with cluster(tmp_path_factory.mktemp("postgres")) as c:
        yield c


_names = itertools.count(1)


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """The URL of a new, empty database on the session's server."""
    return pg_cluster.create_database(f"t{os.getpid()}_{next(_names)}")


@pytest.fixture
def own_pg(tmp_path: Path) -> Iterator[Cluster]:
    """A server of the test's own, to stop and start at will."""
    with cluster(tmp_path) as c:
        yield c

"""Several "hosts" on one machine for the tests: Linux network namespaces joined by a switch.

:class:`Hosts` makes a namespace per host and one more holding a bridge (the switch); each
host gets one veth link to it, ``eth0``, with an address the test chose. Everything is made
inside namespaces named after this process (two test runs at once do not meet) and deleted
at the end, also when the test fails: deleting a namespace deletes its links. Needs root and
iproute2's ``ip`` (scripts/test installs it).

A process runs on a host with :meth:`Hosts.argv` (``ip netns exec``); the test's own calls
run on a host through :class:`OnHost`, a thread that moved into the host's namespace (a
network namespace is per thread, and threads started from it, ZeroMQ's included, inherit
it). :class:`HostCluster` is a throwaway PostgreSQL server listening on a host's address.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from tests.postgres import USER, Cluster, pg_bin

T = TypeVar("T")
CLONE_NEWNET = 0x40000000  # <sched.h>
NETNS_DIR = Path("/run/netns")  # where ``ip netns add`` mounts its namespaces
PREFIX_LEN = 24


def skip_unless_possible() -> None:
    """Skip the test, saying why, where namespaces cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    for tool, package in (("ip", "iproute2"), ("runuser", "util-linux")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (package {package}; scripts/test installs it)")


def ip(*args: str) -> None:
    """Run ``ip ARGS``; a failure says which command and why."""
    proc = subprocess.run(["ip", *args], capture_output=True, timeout=20)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.decode().strip()}")


class Hosts:
    """Hosts on one switch: ``hosts`` maps a short name to its IPv4 address (a /24)."""

    def __init__(self, hosts: dict[str, str]) -> None:
        self.addresses = dict(hosts)
        self.tag = f"lea{os.getpid()}"
        self.switch = f"{self.tag}-sw"
        self.made: list[str] = []

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def argv(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run on ``host``."""
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def up(self) -> None:
        self._add(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for host, address in self.addresses.items():
            ns = self.ns(host)
            self._add(ns)
            # Both ends made inside namespaces: no name is ever taken in the machine's own.
            ip("-n", self.switch, "link", "add", "name", f"to-{host}", "type", "veth", "peer",
               "name", "eth0",
               "netns", ns)
            ip("-n", self.switch, "link", "set", f"to-{host}", "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def _add(self, ns: str) -> None:
        ip("netns", "add", ns)
        self.made.append(ns)

    def cut(self, host: str) -> None:
        """Take the host's link down (its cable pulled): it reaches no one, no one reaches it."""
        ip("-n", self.ns(host), "link", "set", "eth0", "down")

    def mend(self, host: str) -> None:
        """Bring the host's link up again (the partition heals)."""
        ip("-n", self.ns(host), "link", "set", "eth0", "up")

    def down(self) -> None:
        """Kill what still runs in our namespaces (all started by this test), delete them."""
        for ns in reversed(self.made):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  timeout=20).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            with contextlib.suppress(RuntimeError):
                ip("netns", "del", ns)
        self.made.clear()


@contextlib.contextmanager
def hosts(addresses: dict[str, str]) -> Iterator[Hosts]:
    """:class:`Hosts` made, then deleted on exit whatever happened."""
    skip_unless_possible()
    made = Hosts(addresses)
    try:
        try:
            made.up()
        except RuntimeError as exc:
            if "not permitted" in str(exc) and not made.made:
                # Root without CAP_SYS_ADMIN (some containers): no namespace can be made.
                pytest.skip(f"network namespaces cannot be made here: {exc}")
            raise
        yield made
    finally:
        made.down()


def _enter(ns: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / ns, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
    finally:
        os.close(fd)


class OnHost:
    """Runs calls on a host: one thread, moved into the host's namespace before its first
    call. Whatever opens sockets must be made in :meth:`run` (a ZeroMQ context included)."""

    def __init__(self, made: Hosts, host: str) -> None:
        self._pool = ThreadPoolExecutor(1, initializer=_enter, initargs=(made.ns(host),))

    def run(self, call: Callable[[], T], timeout: float = 60.0) -> T:
        return self._pool.submit(call).result(timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class HostCluster(Cluster):
    """A throwaway PostgreSQL server (tests/postgres.py) listening on a host's address, that
    every host on the switch may use without a password. The test itself reaches it through
    its Unix socket (:meth:`url`), which no network namespace hides."""

    PORT = 5432

    def __init__(self, log_dir: Path, made: Hosts, host: str) -> None:
        super().__init__(log_dir)
        self.made, self.host = made, host
        self.port = self.PORT  # the host is ours alone: the usual port is free there
        address = made.addresses[host]
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {address}/{PREFIX_LEN} trust\n")

    def start(self) -> None:
        # Keepalives and tcp_user_timeout: a host cut off loses its sessions (and whatever
        # locks they held) within seconds, not after the system's TCP timeout.
        options = (f"-p {self.port} -k {self.dir} "
                   f"-c listen_addresses={self.made.addresses[self.host]} "
                   "-c fsync=on -c synchronous_commit=on -c tcp_keepalives_idle=2 "
                   "-c tcp_keepalives_interval=1 -c tcp_keepalives_count=3 "
                   "-c tcp_user_timeout=5000")
        bindir = pg_bin()
        assert bindir is not None
        argv = self.made.argv(self.host, ["runuser", "-u", "postgres", "--",
                                          str(bindir / "pg_ctl"), "-D", str(self.data),
                                          "-o", options, "-l", str(self.log), "-w", "start"])
        proc = subprocess.run(argv, cwd=self.dir, capture_output=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"pg_ctl start: {proc.stdout.decode()}{proc.stderr.decode()}")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}@/{dbname}?host={self.dir}&port={self.port}"

    def host_url(self, dbname: str) -> str:
        """The URL the other hosts use."""
        return f"postgresql://{USER}@{self.made.addresses[self.host]}:{self.port}/{dbname}"

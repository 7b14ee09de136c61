"""Fixtures shared by the unit and integration tests: free endpoints and real processes."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.history_sources import note_process
from tests.ldap_server import slapd_server  # noqa: F401 - the OpenLDAP server
from tests.postgres import own_pg, pg_cluster, pg_url  # noqa: F401 - PostgreSQL servers
from tests.xdisplay import xdisplay  # noqa: F401 - the X display fixture, for every test

ROOT = Path(__file__).resolve().parent.parent


_PICK = random.SystemRandom()
LOWEST_PORT = 10000


def _ephemeral_low() -> int:
    """The lowest port the kernel gives outgoing connections (Linux: 32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range: a port the kernel chose (bind to
    0) is one it may give, seconds later, to an outgoing connection, and the process the
    test starts then finds it taken (seen: a console's port taken before it listened)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = _PICK.randrange(LOWEST_PORT, low) if low > LOWEST_PORT + 1000 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError("no free port below the ephemeral range")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="run the long fuzz/chaos variants")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="long variant: run with --long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def lea_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a private tree: free ports, a temporary data dir, fast heartbeats."""
    env = dict(os.environ)
    env.update(
        LEA_MDP_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
        LEA_BUS_IN_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
        LEA_BUS_OUT_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
        LEA_DATA_DIR=str(tmp_path / "var"),
        LEA_HEARTBEAT_INTERVAL_MS="250",
        LEA_HEARTBEAT_LIVENESS="3",
        # No supervisor console (an HTTP server) unless a test asks for one with a free port
        # (tests/integration/test_console_*.py).
        LEA_CONSOLE_PORT="0",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    return env


Spawn = Callable[..., subprocess.Popen[bytes]]


LOG_TAIL_LINES = 60


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report ends with the tail of every process it spawned: on CI that
    output is all there is to tell a slow start from a crash."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    logs: list[Path] = getattr(item, "spawned_logs", [])
    # A fixture that starts a tree fails in setup: its processes' output matters as much.
    if report.when == "teardown" or not report.failed or not logs:
        return
    for log in logs:
        try:
            lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        except OSError as e:
            lines = [f"(unreadable: {e})"]
        report.sections.append((f"spawned {log.name} (last {LOG_TAIL_LINES} lines)",
                                "\n".join(lines)))


@pytest.fixture
def spawn(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Spawn]:
    """Start a real process (``spawn(argv, env=...)``); every one is killed at teardown.

    Output goes to a log file under tmp_path, whose tail the report shows if the test fails.
    Trees and agents are noted for the history check (tests/integration/conftest.py).
    """
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    request.node.spawned_logs = []

    def _spawn(argv: list[str], env: dict[str, str] | None = None, name: str = "proc",
               **kwargs: object) -> subprocess.Popen[bytes]:
        log = tmp_path / f"{name}-{len(procs)}.log"
        out = open(log, "wb")  # noqa: SIM115 - closed with the process
        stdout = kwargs.pop("stdout", out)
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            argv, env=env, stdout=stdout, stderr=out if stdout is not out else subprocess.STDOUT,
            cwd=ROOT, start_new_session=True, **kwargs,  # type: ignore[call-overload]
        )
        out.close()
        note_process(request.node, argv, env if env is not None else os.environ, proc)
        procs.append((proc, log))
        request.node.spawned_logs.append(log)
        return proc

    yield _spawn
    # The test is over: kill -9, not a stop. A graceful stop costs every process of a tree
    # its shutdown (seconds of CPU per test on two cores, minutes over the suite); the tests
    # of stopping send their own SIGTERM.
    for proc, _log in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    for proc, _log in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def python_argv(*args: str) -> list[str]:
    """``python -m`` / script argv for the interpreter running the tests."""
    return [sys.executable, *args]


def wait_until(predicate: Callable[[], object], timeout: float = 10.0,
               interval: float = 0.02) -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)

"""The supervisor with real processes: restarts, hangs, strategies, shutdown, bus events.

Each test runs ``tests/fixtures/run_supervisor.py`` (a real Supervisor) over children from
``tests/fixtures/beacon_child.py``, and binds its own SUB socket at the bus-in endpoint, where
the supervisor's PUB connects, to receive the events directly (no broker involved).
The heartbeat pipe itself is tested first, with real pipes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from runtime.liveness import BEACON_FD_ENV, Beacon, BeaconPipe
from tests.conftest import ROOT, Spawn, python_argv, wait_until
from transport.bus import parse_event

FIXTURES = ROOT / "tests" / "fixtures"
WAIT = 20.0  # generous: the machine may be loaded


# -- the heartbeat pipe ------------------------------------------------------------------------

def test_beacon_is_a_noop_when_not_supervised() -> None:
    beacon = Beacon.from_env({})
    assert not beacon.active
    beacon.beat()  # nothing to write to, nothing raised


def test_beacon_ignores_an_fd_that_is_not_a_pipe_write_end(tmp_path: Path) -> None:
    r, w = os.pipe()
    with open(tmp_path / "f", "wb") as regular:
        for value in ("abc", "-1", "999999", str(r), str(regular.fileno())):
            assert not Beacon.from_env({BEACON_FD_ENV: value}).active, value
    os.close(r)
    assert Beacon.from_env({BEACON_FD_ENV: str(w)}).active
    os.close(w)


def test_beacon_writes_at_most_one_byte_per_interval() -> None:
    r, w = os.pipe()
    os.set_blocking(r, False)
    beacon = Beacon.from_env({BEACON_FD_ENV: str(w)})
    started = time.monotonic()
    for _ in range(10_000):
        beacon.beat()
    elapsed = time.monotonic() - started
    beats = os.read(r, 100)
    # The first call beats at once, the rest are rate-limited (a loaded machine may have
    # made the loop itself last longer than an interval).
    assert beats.startswith(b".")
    assert len(beats) <= 1 + elapsed / 0.25
    time.sleep(0.3)
    beacon.beat()
    assert os.read(r, 100) == b"."
    os.close(r)
    os.close(w)


def test_beacon_never_blocks_on_a_full_pipe_nor_dies_on_a_closed_one() -> None:
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    beacon = Beacon(w, interval_s=0.0)
    for _ in range(100):
        beacon.beat()  # full: dropped, returns at once
    assert beacon.active
    os.close(r)  # the supervisor is gone
    beacon.beat()  # EPIPE (Python ignores SIGPIPE): the beacon turns itself off
    assert not beacon.active
    beacon.beat()


def test_beacon_pipe_reads_beats_and_sees_the_child_exit() -> None:
    pipe = BeaconPipe()
    child = subprocess.Popen(
        python_argv("-c", "import time\nfrom runtime.liveness import Beacon\n"
                          "b = Beacon.from_env()\nassert b.active\n"
                          "for _ in range(3):\n    b.beat(); time.sleep(0.3)\n"),
        env={**os.environ, "PYTHONPATH": str(ROOT), **pipe.child_env()},
        pass_fds=(pipe.write_fd,), cwd=ROOT,
    )
    pipe.close_write_end()
    assert pipe.deadline(1.0, started_at=100.0, grace_s=5.0) == 105.0  # no beat yet: grace
    assert child.wait(WAIT) == 0
    assert pipe.drain(now=200.0) is False  # beats read, then EOF: every writer is gone
    assert pipe.beats == 3
    assert pipe.last_beat == 200.0
    assert pipe.deadline(1.0, started_at=100.0, grace_s=5.0) == 201.0
    pipe.close()


# -- harness -----------------------------------------------------------------------------------

class Tree:
    """A supervisor run in a subprocess, its children's records, and the bus events."""

    def __init__(self, tmp_path: Path, env: dict[str, str], spawn: Spawn) -> None:
        self.tmp = tmp_path
        self.env = env
        self.spawn = spawn
        self.record = tmp_path / "record.txt"
        self.ctl = tmp_path / "ctl"
        self.ctl.mkdir()
        self.events_file = tmp_path / "events.jsonl"
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"lea:")
        self.sub.bind(env["LEA_BUS_IN_ENDPOINT"])
        self.bus: list[dict[str, Any]] = []
        self.proc: subprocess.Popen[bytes] | None = None

    def child(self, name: str, *flags: str, **spec: Any) -> dict[str, Any]:
        argv = python_argv(str(FIXTURES / "beacon_child.py"), name, "--record",
                           str(self.record), "--ctl-dir", str(self.ctl), *flags)
        return {"name": name, "argv": argv, "beacon_timeout_s": 2.0,
                "shutdown_timeout_s": 5.0, **spec}

    def start(self, children: list[dict[str, Any]], **tree: Any) -> subprocess.Popen[bytes]:
        path = self.tmp / "tree.json"
        path.write_text(json.dumps(
            {"children": children, "events_file": str(self.events_file), **tree}))
        self.proc = self.spawn(python_argv(str(FIXTURES / "run_supervisor.py"), str(path)),
                               env=self.env, name="supervisor")
        return self.proc

    def lines(self) -> list[tuple[str, str, int]]:
        if not self.record.exists():
            return []
        out = []
        for line in self.record.read_text().splitlines():
            event, name, pid = line.split()
            out.append((event, name, int(pid)))
        return out

    def pids(self, name: str) -> list[int]:
        """Pids of every start of ``name``, in order."""
        return [pid for event, n, pid in self.lines() if event == "start" and n == name]

    def wait_starts(self, name: str, count: int = 1) -> list[int]:
        # Polling the SUB while waiting matters: a bound SUB only sends its subscription to a
        # newly connected PUB when the application calls into it (libzmq #2267); until then
        # the supervisor's PUB drops every event.
        wait_until(lambda: self.bus_events() is None or len(self.pids(name)) >= count, WAIT)
        return self.pids(name)

    def wait_all_started(self, *names: str) -> dict[str, int]:
        return {name: self.wait_starts(name)[-1] for name in names}

    def command(self, name: str, text: str) -> None:
        tmp = self.ctl / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.ctl / name)  # atomic: the child never reads half a command

    def bus_events(self) -> list[dict[str, Any]]:
        while self.sub.poll(0):
            event = parse_event(self.sub.recv_multipart())
            self.bus.append({"topic": event.topic, "source": event.source, **event.data})
        return self.bus

    def hook_events(self) -> list[dict[str, Any]]:
        if not self.events_file.exists():
            return []
        text = self.events_file.read_text()
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]

    def find(self, topic: str, **match: Any) -> dict[str, Any] | None:
        """The first bus event on ``topic`` whose data has ``match``."""
        for event in self.bus_events():
            if event["topic"] == topic and all(event.get(k) == v for k, v in match.items()):
                return event
        return None

    def wait_event(self, topic: str, **match: Any) -> dict[str, Any]:
        event = wait_until(lambda: self.find(topic, **match), WAIT)
        assert isinstance(event, dict)
        return event

    def close(self) -> None:
        self.sub.close()
        self.ctx.term()


@pytest.fixture
def tree(tmp_path: Path, lea_env: dict[str, str], spawn: Spawn) -> Iterator[Tree]:
    t = Tree(tmp_path, lea_env, spawn)
    yield t
    t.close()


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that may never come in a container is dead)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def since(events: list[dict[str, Any]], topic: str, **match: Any) -> list[dict[str, Any]]:
    """``events`` from the first one on ``topic`` matching ``match``."""
    for index, e in enumerate(events):
        if e["topic"] == topic and all(e.get(k) == v for k, v in match.items()):
            return events[index:]
    raise AssertionError(f"no {topic} {match} in {events}")


def sequence(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["topic"].removeprefix("lea:actor_"), e["name"]) for e in events]


# -- restarts ----------------------------------------------------------------------------------

def test_kill9_child_is_restarted_and_beats_again_others_keep_their_pids(tree: Tree) -> None:
    tree.start([tree.child("a"),
                tree.child("b", beacon_timeout_s=1.5, start_grace_s=3.0),
                tree.child("c")])
    before = tree.wait_all_started("a", "b", "c")
    os.kill(before["b"], signal.SIGKILL)

    new_b = tree.wait_starts("b", 2)[-1]
    assert new_b != before["b"]
    exited = tree.wait_event("lea:actor_exited", name="b", pid=before["b"])
    assert exited["exit_code"] is None
    assert exited["signal"] == "SIGKILL"
    assert exited["reason"] == "signal"
    assert exited["source"] == "supervisor"
    tree.wait_event("lea:actor_started", name="b", pid=new_b)
    restarted = tree.wait_event("lea:actor_restarted", name="b", pid=new_b)
    assert restarted["previous_pid"] == before["b"]
    assert restarted["restarts_in_period"] == 1

    # Beats again: past its first-beat grace and its beacon timeout, it is still the same one.
    time.sleep(4.0)
    assert tree.pids("b") == [before["b"], new_b]
    assert alive(new_b)
    assert tree.pids("a") == [before["a"]]
    assert tree.pids("c") == [before["c"]]
    assert not tree.find("lea:actor_exited", name="a")
    assert not tree.find("lea:actor_exited", name="c")
    assert not tree.find("lea:actor_exited", reason="hung")


def test_sigstopped_child_is_killed_as_hung_and_restarted(tree: Tree) -> None:
    tree.start([tree.child("a", beacon_timeout_s=1.5), tree.child("b")])
    before = tree.wait_all_started("a", "b")
    time.sleep(0.5)  # let it beat: the 1.5 s timeout then applies, not the start grace
    os.kill(before["a"], signal.SIGSTOP)

    new_a = tree.wait_starts("a", 2)[-1]
    exited = tree.wait_event("lea:actor_exited", name="a", pid=before["a"])
    assert exited["reason"] == "hung"
    assert exited["signal"] == "SIGKILL"
    assert exited["exit_code"] is None
    tree.wait_event("lea:actor_restarted", name="a", pid=new_a, previous_pid=before["a"])
    wait_until(lambda: not alive(before["a"]), WAIT)
    assert tree.pids("b") == [before["b"]]


def test_child_that_never_beats_is_hung_after_its_start_grace(tree: Tree) -> None:
    tree.start([tree.child("mute", "--no-beat", beacon_timeout_s=1.0, start_grace_s=1.0)],
               max_restarts=100)
    first = tree.wait_starts("mute")[0]
    exited = tree.wait_event("lea:actor_exited", name="mute", pid=first)
    assert exited["reason"] == "hung"


def test_crash_loop_exceeds_intensity_and_stops_the_tree(tree: Tree) -> None:
    crash = tree.tmp / "crash"
    proc = tree.start([tree.child("a"),
                       tree.child("b", "--exit-at-start", "3", "--only-if-exists", str(crash))],
                      max_restarts=3, period_s=60.0)
    tree.wait_all_started("a", "b")
    crash.touch()  # from now on b crashes as soon as it starts
    tree.command("b", "exit 3")
    assert proc.wait(WAIT * 2) == 1
    # Started once, then restarted 3 times; the 4th restart would exceed the intensity.
    assert len(tree.pids("b")) == 4
    a = tree.pids("a")
    assert len(a) == 1
    assert ("term", "a", a[0]) in tree.lines()
    assert not alive(a[0])
    events = tree.hook_events()
    crashes = [e for e in events if e["topic"] == "lea:actor_exited" and e["name"] == "b"]
    assert len(crashes) == 4
    assert all(e["exit_code"] == 3 and e["reason"] == "exit" for e in crashes)
    assert events[-1] == {"topic": "lea:actor_exited", "name": "a", "pid": a[0],
                          "exit_code": 0, "signal": None, "reason": "shutdown"}
    restarts = [e["restarts_in_period"] for e in events if e["topic"] == "lea:actor_restarted"]
    assert restarts == [1, 2, 3]
    log = next(tree.tmp.glob("supervisor-*.log")).read_text()
    assert "restart intensity exceeded" in log


def test_transient_children_restart_only_after_an_abnormal_exit(tree: Tree) -> None:
    tree.start([tree.child(n, restart="transient") for n in ("clean", "crash", "killed")])
    before = tree.wait_all_started("clean", "crash", "killed")
    tree.command("clean", "exit 0")
    tree.command("crash", "exit 1")
    tree.command("killed", f"signal {int(signal.SIGTERM)}")  # not sent by the supervisor

    tree.wait_starts("crash", 2)
    tree.wait_starts("killed", 2)
    exited = tree.wait_event("lea:actor_exited", name="clean", pid=before["clean"])
    assert (exited["exit_code"], exited["reason"]) == (0, "exit")
    assert tree.wait_event("lea:actor_exited", name="crash")["exit_code"] == 1
    killed = tree.wait_event("lea:actor_exited", name="killed")
    assert (killed["signal"], killed["reason"]) == ("SIGTERM", "signal")
    time.sleep(1.0)
    assert tree.pids("clean") == [before["clean"]]
    assert not tree.find("lea:actor_restarted", name="clean")


def test_temporary_children_are_never_restarted(tree: Tree) -> None:
    proc = tree.start([tree.child("p"),
                       tree.child("t1", restart="temporary"),
                       tree.child("t2", restart="temporary")])
    before = tree.wait_all_started("p", "t1", "t2")
    os.kill(before["t1"], signal.SIGKILL)
    tree.command("t2", "exit 1")
    tree.wait_event("lea:actor_exited", name="t1", reason="signal")
    tree.wait_event("lea:actor_exited", name="t2", exit_code=1)
    time.sleep(1.0)
    assert tree.pids("t1") == [before["t1"]]
    assert tree.pids("t2") == [before["t2"]]
    assert not tree.find("lea:actor_restarted")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(WAIT) == 0
    assert [(e, n) for e, n, _ in tree.lines() if e == "term"] == [("term", "p")]


def test_rest_for_one_restarts_the_later_children_in_order(tree: Tree) -> None:
    tree.start([tree.child(n) for n in "abcd"], strategy="rest_for_one")
    before = tree.wait_all_started(*"abcd")
    os.kill(before["b"], signal.SIGKILL)

    tree.wait_starts("d", 2)
    wait_until(lambda: tree.find("lea:actor_restarted", name="d"), WAIT)
    events = since(tree.bus_events(), "lea:actor_exited", name="b", pid=before["b"])
    assert sequence(events) == [
        ("exited", "b"), ("exited", "d"), ("exited", "c"),
        ("started", "b"), ("restarted", "b"),
        ("started", "c"), ("restarted", "c"),
        ("started", "d"), ("restarted", "d"),
    ]
    stops = [(e["name"], e["reason"]) for e in events if e["topic"] == "lea:actor_exited"]
    assert stops == [("b", "signal"), ("d", "shutdown"), ("c", "shutdown")]
    terms = [n for e, n, _ in tree.lines() if e == "term"]
    assert terms == ["d", "c"]
    assert tree.pids("a") == [before["a"]]
    for name in "bcd":
        assert len(tree.wait_starts(name, 2)) == 2  # each may record its start late
    restarted = tree.find("lea:actor_restarted", name="c")
    assert restarted is not None
    assert restarted["previous_pid"] == before["c"]
    assert restarted["restarts_in_period"] == 1  # one decision, one restart counted


def test_one_for_all_restarts_every_child_in_order(tree: Tree) -> None:
    tree.start([tree.child(n) for n in "abc"], strategy="one_for_all")
    before = tree.wait_all_started(*"abc")
    os.kill(before["b"], signal.SIGKILL)

    wait_until(lambda: tree.find("lea:actor_restarted", name="c"), WAIT)
    events = since(tree.bus_events(), "lea:actor_exited", name="b", pid=before["b"])
    assert sequence(events) == [
        ("exited", "b"), ("exited", "c"), ("exited", "a"),
        ("started", "a"), ("restarted", "a"),
        ("started", "b"), ("restarted", "b"),
        ("started", "c"), ("restarted", "c"),
    ]
    assert [n for e, n, _ in tree.lines() if e == "term"] == ["c", "a"]
    for name in "abc":
        pids = tree.wait_starts(name, 2)
        assert pids[0] == before[name]
        assert not alive(pids[0])


# -- shutdown ----------------------------------------------------------------------------------

def test_sigterm_stops_children_in_reverse_order_with_sigkill_after_timeout(
        tree: Tree) -> None:
    proc = tree.start([tree.child("a"),
                       tree.child("b", "--ignore-term", shutdown_timeout_s=1.0),
                       tree.child("c")])
    pids = tree.wait_all_started("a", "b", "c")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(WAIT) == 0

    assert [n for e, n, _ in tree.lines() if e == "term"] == ["c", "b", "a"]
    for pid in pids.values():
        assert not alive(pid)
    exits = [e for e in tree.hook_events() if e["topic"] == "lea:actor_exited"]
    assert [(e["name"], e["exit_code"], e["signal"], e["reason"]) for e in exits] == [
        ("c", 0, None, "shutdown"),
        ("b", None, "SIGKILL", "shutdown"),
        ("a", 0, None, "shutdown"),
    ]
    # The PUB flushes before the supervisor exits: the bus saw them too.
    wait_until(lambda: tree.find("lea:actor_exited", name="a", reason="shutdown"), WAIT)


def test_sigkilled_supervisor_takes_its_children_down(tree: Tree) -> None:
    proc = tree.start([tree.child("a"), tree.child("b", "--ignore-term")])
    pids = tree.wait_all_started("a", "b")
    proc.kill()
    proc.wait(WAIT)
    wait_until(lambda: not any(alive(pid) for pid in pids.values()), WAIT)


def test_a_child_that_cannot_start_fails_the_tree(tree: Tree) -> None:
    missing = os.path.join(tempfile.gettempdir(), "no-such-dir", "no-such-program")
    proc = tree.start([tree.child("a"), {"name": "ghost", "argv": [missing]}])
    assert proc.wait(WAIT) == 1
    a = tree.pids("a")
    # "a" may be stopped before it even recorded its start; if it did, it was stopped.
    for pid in a:
        assert not alive(pid)


def test_a_child_that_cannot_be_restarted_counts_as_crashing(tree: Tree) -> None:
    program = tree.tmp / "program"
    child = tree.child("a")
    program.write_text("#!/bin/sh\nexec " + " ".join(child["argv"]) + "\n")
    program.chmod(0o755)
    proc = tree.start([tree.child("p"), {**child, "argv": [str(program)]}],
                      max_restarts=2, period_s=60.0)
    a = tree.wait_all_started("p", "a")["a"]
    program.unlink()  # the next start of "a" fails to spawn
    os.kill(a, signal.SIGKILL)
    assert proc.wait(WAIT) == 1
    failures = [e for e in tree.hook_events()
                if e["topic"] == "lea:actor_exited" and e["name"] == "a" and e["pid"] is None]
    assert [(e["exit_code"], e["reason"]) for e in failures] == [(127, "exit")] * 2
    assert tree.pids("a") == [a]

"""Checks shared by the transport-contract tests (edge cases a-k and C1-C5,
docs/architecture.md, "The contract's named rules").

They read what the real processes left behind: the dispatcher's reports log (its SQLite
store, or PostgreSQL), an agent's on-disk ledger and effects log, its output, and the event bus.
"""

from __future__ import annotations

import signal
import sqlite3
import threading
from contextlib import closing
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import zmq

from messages.dispatch import InFlightList, ListTracked
from messages.events import Event
from tests.conftest import wait_until
from tests.integration.system import Agent, System, clicks, workflow
from transport.bus import Publisher, Subscriber


class Report(NamedTuple):
    """One report as the dispatcher recorded it (``status``: accepted, stale, duplicate...)."""

    action_id: str
    attempt_id: str
    status: str
    success: bool
    error: str | None
    warning: str | None


class Row(NamedTuple):
    """One row of an agent's ledger (``answered_by``: an alias, never executed itself)."""

    replay_id: str
    action_id: str
    attempt_id: str
    state: str
    started_at: float
    finished_at: float | None
    unacked: bool
    answered_by: str | None


def _query(path: Path, sql: str, *args: Any) -> list[Any]:
    # Read-only: the owner process keeps writing (WAL lets us read alongside).
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
        return db.execute(sql, args).fetchall()


def _dispatcher_query(system: System, sql: str, *args: Any) -> list[Any]:
    """Read the dispatcher's database: its SQLite file, or PostgreSQL (LEA_DATABASE_URL)."""
    url = system.env.get("LEA_DATABASE_URL")
    if not url:
        return _query(Path(system.env["LEA_DATA_DIR"]) / "dispatcher.sqlite3", sql, *args)
    with psycopg.connect(url, options="-c search_path=dispatcher") as conn:
        return conn.execute(sql.replace("?", "%s").encode(), args).fetchall()


def reports(system: System, replay_id: str, action_id: str | None = None) -> list[Report]:
    """Every report the dispatcher received for ``replay_id`` (one action's), oldest first."""
    sql = ("SELECT action_id, attempt_id, status, success, error, warning FROM reports"
           " WHERE replay_id = ?" + (" AND action_id = ?" if action_id else "") + " ORDER BY id")
    args = (replay_id, action_id) if action_id else (replay_id,)
    rows = _dispatcher_query(system, sql, *args)
    return [Report(a, t, s, bool(ok), e, w) for a, t, s, ok, e, w in rows]


def wait_watchdog_tracks(system: System, attempt_id: str) -> None:
    """Until the watchdog times ``attempt_id`` (Track is batched by the dispatcher): freezing
    the dispatcher now cannot hide that attempt from the watchdog."""
    def tracked() -> bool:
        reply = system.call("watchdog", ListTracked())
        return isinstance(reply, InFlightList) and any(
            e.attempt_id == attempt_id for e in reply.entries)

    wait_until(tracked, timeout=20)


def accepted(system: System, replay_id: str, action_id: str) -> Report:
    """The one report applied for an action (I3: never two)."""
    found = [r for r in reports(system, replay_id, action_id) if r.status == "accepted"]
    assert len(found) == 1, f"{action_id}: {len(found)} reports applied, not one: {found}"
    return found[0]


def ledger(agent: Agent) -> list[Row]:
    path = agent.data_dir / "ledger.sqlite3"
    if not path.exists():
        return []
    rows = _query(path, "SELECT replay_id, action_id, attempt_id, state, started_at,"
                        " finished_at, outbox IS NOT NULL, answered_by FROM actions ORDER BY seq")
    return [Row(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), r[7]) for r in rows]


def ledger_row(agent: Agent, action_id: str) -> Row | None:
    return next((r for r in ledger(agent) if r.action_id == action_id), None)


def agent_log(agent: Agent) -> str:
    """The output of every process started for this machine id (the spawn fixture's logs)."""
    logs = sorted(agent.system.tmp.glob(f"agent-{agent.machine_id}-*.log"))
    return "".join(p.read_text(errors="replace") for p in logs)


def wait_registered(system: System, machine_id: str, present: bool = True) -> None:
    """Until the broker has (or, ``present=False``, no longer has) a worker for the agent."""
    want = [b"200" if present else b"404"]
    service = f"agent.{machine_id}".encode()
    wait_until(lambda: system.client.raw("mmi.service", service, timeout_s=1.0) == want,
               timeout=20)


def wait_ready(system: System, agent: Agent) -> None:
    """Until the agent serves and the dispatcher has answered its hello: a replay started
    from now on is not resent by that hello (which would blur which attempt did what)."""
    wait_registered(system, agent.machine_id)
    wait_until(lambda: "dispatcher answered hello" in agent_log(agent), timeout=20)


# The client invariants C1-C5 -----------------------------------------------------------------

def assert_exactly_once(agent: Agent, action_ids: list[str]) -> None:
    """C4 (idempotence): the agent performed exactly these inputs, each once, in this order.

    ``wait`` actions leave no line (they perform no input)."""
    effects = agent.effects()
    done = [e["action_id"] for e in effects]
    assert done == action_ids, f"C4 (exactly-once effects) broken on {agent.machine_id}: {done}"
    assert {e["machine_id"] for e in effects} <= {agent.machine_id}


def assert_all_reported(system: System, agent: Agent) -> None:
    """C1: every action the agent received (a ledger row) was reported and the report acked.

    An alias row (an id superseded by a resume) may never have been received: only its
    outbox, if it had one, must be acked."""
    wait_until(lambda: all(r.state == "finished" and not r.unacked for r in ledger(agent)),
               timeout=30)
    for row in ledger(agent):
        if row.answered_by is not None:
            continue
        assert reports(system, row.replay_id, row.action_id), (
            f"C1 (every received action is reported) broken: {row.action_id}")


def assert_one_at_a_time(agent: Agent) -> None:
    """C2: one action executing at a time: the ledger's [started, finished] never overlap."""
    rows = sorted((r for r in ledger(agent) if r.answered_by is None),
                  key=lambda r: r.started_at)
    for a, b in pairwise(rows):
        assert a.finished_at is not None and a.finished_at <= b.started_at, (
            f"C2 (one action at a time) broken: {a.action_id} and {b.action_id} overlap")


def assert_client_invariants(system: System, agent: Agent, action_ids: list[str]) -> None:
    """C1, C2 and C4 together, after a replay has ended."""
    assert_all_reported(system, agent)
    assert_one_at_a_time(agent)
    assert_exactly_once(agent, action_ids)


# The event bus -------------------------------------------------------------------------------

class Bus:
    """Every bus event since it was built, collected by a thread (``close`` it)."""

    def __init__(self, env: dict[str, str]) -> None:
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(env["LEA_BUS_OUT_ENDPOINT"],),
                                        daemon=True)
        self._thread.start()
        # PUB/SUB drops what is published before a subscription has propagated: publish a
        # probe until it comes back, then no later event can be missed.
        pub = Publisher(zmq.Context.instance(), env["LEA_BUS_IN_ENDPOINT"], source="test")

        def probe() -> list[Event]:
            pub.publish("lea:probe")
            return self.events("lea:probe")

        try:
            wait_until(probe, timeout=10, interval=0.05)
        finally:
            pub.close()

    def _run(self, endpoint: str) -> None:
        sub = Subscriber(zmq.Context.instance(), endpoint)
        try:
            while not self._stop.is_set():
                event = sub.recv(timeout_s=0.1)
                if event is not None:
                    with self._lock:
                        self._events.append(event)
        finally:
            sub.close()

    def events(self, topic: str, **match: Any) -> list[Event]:
        """Events of ``topic`` whose data has every ``match`` item."""
        with self._lock:
            found = [e for e in self._events if e.topic == topic]
        return [e for e in found if all(e.data.get(k) == v for k, v in match.items())]

    def wait_for(self, topic: str, timeout: float = 30.0, **match: Any) -> Event:
        wait_until(lambda: self.events(topic, **match), timeout=timeout)
        return self.events(topic, **match)[0]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# Scenarios shared by tests of several configurations ----------------------------------------

def dispatcher_kill_9_mid_replays(system: System, prefix: str, timeout: float = 30) -> None:
    """kill -9 of the dispatcher while three replays run on three machines (transport case
    i): the supervisor restarts it, it reloads every replay from its store, re-sends each
    in-flight action with a new attempt id, and every replay continues where it was: every
    step exactly once, in order, on each machine."""
    agents = [system.agent(f"{prefix}{n}", {"default": {"delay_s": 0.25}}) for n in range(3)]
    for agent in agents:
        wait_ready(system, agent)
    rids = [system.start(workflow(*clicks(8)), a.machine_id) for a in agents]
    wait_until(lambda: all(system.status(r).index >= 2 for r in rids), timeout=30)
    before = [system.status(r) for r in rids]
    old = system.kill("dispatcher", signal.SIGKILL)
    assert all(s.status == "running" and s.index < 8 for s in before)

    wait_until(lambda: system.pid("dispatcher") not in (None, old), timeout=20)
    steps = [f"s{n}" for n in range(8)]
    for rid, agent, then in zip(rids, agents, before, strict=True):
        summary = system.wait_status(rid, "completed", timeout=timeout)
        assert summary.completed_actions == 8
        # Its in-flight action was re-sent (new attempt) by the restarted dispatcher.
        assert summary.counters.get("resent", 0) > then.counters.get("resent", 0)
        assert_client_invariants(system, agent, steps)

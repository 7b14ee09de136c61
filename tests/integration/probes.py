"""What integration tests look at besides status: the dispatcher's reports log, the CLI as a
subprocess, the bus, the broker's MMI, and "nothing happens for a while" windows.

Kept apart from system.py (which others extend) and only reads: the reports log is opened
read-only, the CLI is the one a person runs.
"""

from __future__ import annotations

import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from messages.base import Message
from messages.dispatch import ActionReport
from messages.events import Event
from messages.replay import ReplaySummary
from tests.conftest import ROOT, python_argv, wait_until
from tests.integration.system import Agent, System
from transport.bus import Subscriber
from transport.client import CallFailed, SyncClient


def serves(client: SyncClient, service: str, timeout_s: float = 1.0) -> bool:
    """Whether the broker has a worker for ``service`` now (``mmi.service``). A broker that
    does not answer yet (still starting, on a loaded machine) is a "not yet", not a failure:
    for ``wait_until``."""
    try:
        return client.raw("mmi.service", service.encode(), timeout_s=timeout_s) == [b"200"]
    except CallFailed:
        return False


def reports(system: System, replay_id: str | None = None) -> list[dict[str, Any]]:
    """The dispatcher's reports log (every report received and how it was answered)."""
    path = Path(system.env["LEA_DATA_DIR"]) / "dispatcher.sqlite3"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        sql = ("SELECT replay_id, action_id, attempt_id, sender_machine, status, success, "
               "error, warning, body FROM reports")
        rows = db.execute(sql + (" WHERE replay_id = ?" if replay_id else "") + " ORDER BY id",
                          (replay_id,) if replay_id else ()).fetchall()
    finally:
        db.close()
    keys = ("replay_id", "action_id", "attempt_id", "sender_machine", "status", "success",
            "error", "warning", "body")
    out = [dict(zip(keys, row, strict=True)) for row in rows]
    for item in out:
        item["body"] = msgpack.unpackb(item["body"], raw=False)
    return out


def report_statuses(system: System, replay_id: str, action_id: str) -> list[str]:
    return [r["status"] for r in reports(system, replay_id) if r["action_id"] == action_id]


def resend_of(logged: dict[str, Any]) -> ActionReport:
    """The report as the agent sent it, rebuilt from the log (screenshots were hashed)."""
    body = {k: v for k, v in logged["body"].items()
            if k not in ("screenshot_before", "screenshot_after")}
    return ActionReport.model_validate(body)


def refused_call(system: System, service: str, message: Message) -> CallFailed:
    """Call ``service`` expecting an ErrorReply; the CallFailed carrying its code."""
    with pytest.raises(CallFailed) as info:
        system.call(service, message)
    assert info.value.code != "timeout", f"{service} did not answer {message!r}"
    return info.value


def cli(system: System, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``python run.py ARGS`` against the system's tree, as a person would run it."""
    return subprocess.run(python_argv("run.py", *args), env=system.env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


def mmi(system: System, service: str) -> bytes:
    """The broker's RFC 8 answer for ``service``: b"200" (has a worker) or b"404"."""
    return system.client.raw("mmi.service", service.encode(), timeout_s=2.0)[0]


def wait_ready(system: System, agent: Agent, timeout: float = 30.0) -> None:
    """Until ``agent`` is registered with the broker and the dispatcher has answered its
    hello: a replay started after this is not re-sent by that first hello."""
    def ready() -> bool:
        logs = sorted(system.tmp.glob(f"agent-{agent.machine_id}-*.log"),
                      key=lambda p: p.stat().st_mtime)
        return (mmi(system, f"agent.{agent.machine_id}") == b"200" and bool(logs)
                and "dispatcher answered hello" in logs[-1].read_text(errors="replace"))

    wait_until(ready, timeout=timeout, interval=0.05)


def ready_agent(system: System, machine_id: str,
                scenario: dict[str, Any] | None = None) -> Agent:
    """A new agent, once ready (:func:`wait_ready`): then its first hello re-sends nothing
    of a replay started afterwards, and the replay's counters are exact."""
    agent = system.agent(machine_id, scenario=scenario)
    wait_ready(system, agent)
    return agent


def hold(predicate: Callable[[], object], for_s: float, interval: float = 0.1) -> int:
    """Check ``predicate`` continuously for ``for_s`` seconds; fail the test the first time
    it is false. For claims of the form "nothing happens during N heartbeats". Returns how
    many times it was checked."""
    deadline = time.monotonic() + for_s
    checks = 0
    while True:
        value = predicate()
        checks += 1
        if not value:
            pytest.fail(f"stopped holding after {checks} checks: {predicate}")
        if time.monotonic() > deadline:
            return checks
        time.sleep(interval)


def progress(s: ReplaySummary) -> dict[str, Any]:
    """What must not move when nothing is supposed to happen (updated_at included)."""
    return s.model_dump(mode="json")


class Tap:
    """Bus events collected by a background thread, like ``run.py tap``."""

    def __init__(self, system: System, prefix: str = "lea:") -> None:
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._sub = Subscriber(self._ctx, system.env["LEA_BUS_OUT_ENDPOINT"], prefix)
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            event = self._sub.recv(timeout_s=0.1)
            if event is not None:
                with self._lock:
                    self._events.append(event)

    def events(self, topic: str | None = None) -> list[Event]:
        with self._lock:
            return [e for e in self._events if topic is None or e.topic == topic]

    def wait(self, topic: str, where: Callable[[Event], bool] = lambda _e: True,
             timeout: float = 20.0) -> Event:
        found = wait_until(lambda: next((e for e in self.events(topic) if where(e)), None),
                           timeout=timeout)
        assert isinstance(found, Event)
        return found

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sub.close()
        self._ctx.term()

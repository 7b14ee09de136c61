"""The monitor_router actor as a real process behind a real broker; agents' heartbeats."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from messages import events
from messages.base import Message
from messages.codec import decode
from messages.control import ErrorReply, Ping, Pong
from messages.events import Event
from messages.monitor import (
    AgentHeartbeat,
    Monitor,
    MonitorResolution,
    MonitorStatus,
    MonitorStatusReply,
    ResolveMonitor,
)
from messages.replay import Ack
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import serves
from transport.bus import Subscriber
from transport.client import SyncClient

TTL_S = 1.5

THREE = [
    Monitor(idx=0, x=0, y=0, w=1920, h=1080, primary=True, name="DISPLAY1"),
    Monitor(idx=1, x=-1280, y=-200, w=1280, h=1024, name="DISPLAY2"),
    Monitor(idx=2, x=1920, y=0, w=2560, h=1440, name="DISPLAY3"),
]


class Router:
    """A client of the broker and a watcher of the bus, for one test."""

    def __init__(self, env: dict[str, str]) -> None:
        self.client = SyncClient(env["LEA_MDP_ENDPOINT"])
        self.client_endpoint = env["LEA_MDP_ENDPOINT"]
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.bus = Subscriber(self.ctx, env["LEA_BUS_OUT_ENDPOINT"], "lea:")
        self.events: list[Event] = []

    def call(self, msg: Message) -> Message:
        return self.client.call("monitor_router", msg, timeout_s=5.0).body

    def resolve(self, index: int | None = None, geometry: Monitor | None = None,
                machine_id: str = "m1", action_id: str = "a1") -> MonitorResolution:
        reply = self.call(ResolveMonitor(machine_id=machine_id, action_id=action_id,
                                         action_type="click", monitor_index=index,
                                         monitor_geometry=geometry, replay_id="r1"))
        assert isinstance(reply, MonitorResolution), reply
        return reply

    def event(self, topic: str, **match: Any) -> Event:
        """The first event on ``topic`` whose data has ``match`` (waits for it)."""
        deadline = time.monotonic() + 10
        while True:
            for e in self.events:
                if e.topic == topic and all(e.data.get(k) == v for k, v in match.items()):
                    return e
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {topic} {match} in {[x.topic for x in self.events]}")
            got = self.bus.recv(timeout_s=min(left, 0.5))
            if got is not None:
                self.events.append(got)

    def close(self) -> None:
        self.client.close()
        self.bus.close()
        self.ctx.term()


@pytest.fixture
def router(spawn: Spawn, lea_env: dict[str, str]) -> Iterator[Router]:
    lea_env["LEA_MONITOR_ROUTER_HEARTBEAT_TTL_S"] = str(TTL_S)
    spawn(python_argv("-m", "broker"), env=lea_env, name="broker")
    spawn(python_argv("-m", "actors", "monitor_router"), env=lea_env, name="monitor_router")
    r = Router(lea_env)
    wait_until(lambda: serves(r.client, "monitor_router"))
    # the bus subscription is live once a fresh event comes through
    wait_until(lambda: r.resolve(action_id="probe") and any(
        e.data.get("action_id") == "probe" for e in _drain(r)), 10)
    yield r
    r.close()


def _drain(r: Router) -> list[Event]:
    while (e := r.bus.recv(timeout_s=0.2)) is not None:
        r.events.append(e)
    return r.events


def beat(machine_id: str = "m1", monitors: list[Monitor] = THREE, focus: int | None = 0,
         at: float | None = None) -> AgentHeartbeat:
    return AgentHeartbeat(machine_id=machine_id, monitor_index=focus,
                          monitors_geometry=monitors, active_window_title="Dossier patient",
                          at=time.time() if at is None else at)


def test_heartbeat_then_resolve_each_case_with_its_events(router: Router) -> None:
    assert router.resolve(1).reason == "no_heartbeat"
    ack = router.call(beat(focus=2))
    assert isinstance(ack, Ack) and ack.detail == {"monitors": 3}

    t = router.resolve(1, action_id="left")
    assert (t.idx, t.offset_x, t.offset_y, t.w, t.h, t.source) == (1, -1280, -200, 1280, 1024,
                                                                   "action")
    routed = router.event(events.MONITOR_ROUTED, action_id="left")
    assert routed.source == "monitor_router"
    assert (routed.data["machine_id"], routed.data["idx"], routed.data["source"]) == (
        "m1", 1, "action")

    t = router.resolve(7, action_id="unplugged")
    assert (t.idx, t.source, t.reason) == (2, "focus", "recorded_monitor_unavailable")
    assert router.event(events.MONITOR_UNAVAILABLE, action_id="unplugged").data[
        "monitor_index"] == 7

    t = router.resolve(-1, action_id="invalid")
    assert (t.idx, t.offset_x, t.source, t.reason) == (-1, 0, "composite_fallback",
                                                       "invalid_index")
    router.event(events.MONITOR_INVALID_INDEX, action_id="invalid")

    moved = THREE[1].model_copy(update={"idx": 1})
    today = [THREE[0], THREE[2].model_copy(update={"idx": 1}),
             moved.model_copy(update={"idx": 2, "x": 4480})]
    router.call(beat(monitors=today, focus=0))
    t = router.resolve(1, moved, action_id="moved")
    assert (t.idx, t.offset_x, t.reason) == (2, 4480, "moved")

    # another machine is another screen
    router.call(beat("m2", [THREE[0]], 0))
    assert router.resolve(None, machine_id="m2").offset_x == 0
    assert router.resolve(None).source == "focus"

    # a heartbeat believed past its TTL would route on a screen that may have changed
    time.sleep(TTL_S + 0.2)
    assert router.resolve(1, action_id="stale").reason == "stale_heartbeat"
    status = router.call(MonitorStatus(machine_id="m1"))
    assert isinstance(status, MonitorStatusReply) and status.agents[0].age_s > TTL_S


def test_malformed_input_is_refused_and_the_router_goes_on(router: Router) -> None:
    bad = [
        {"machine_id": "m1", "at": 1.0, "monitors_geometry": [THREE[0].model_dump()] * 2},
        {"machine_id": "m1", "at": 1.0, "monitor_index": 99},
        {"machine_id": "", "at": 1.0},
        {"machine_id": "m1", "at": "yesterday"},
        {"machine_id": "m1", "at": 1.0, "monitors_geometry": [{"idx": 0, "x": 0, "y": 0,
                                                               "w": -5, "h": 10}]},
        {"machine_id": "m1", "at": 1.0, "intruder": True},
    ]
    for body in bad:
        raw = msgpack.packb({"v": 1, "type": "monitor.heartbeat", "id": "x", "body": body})
        frames = router.client.raw("monitor_router", raw, timeout_s=5.0)
        reply = decode(frames[-1]).body
        assert isinstance(reply, ErrorReply), (body, reply)
    router.event(events.BAD_MESSAGE, service="monitor_router")
    bad_resolve = msgpack.packb({"v": 1, "type": "monitor.resolve", "id": "y",
                                 "body": {"machine_id": "m1"}})
    assert isinstance(decode(router.client.raw("monitor_router", bad_resolve)[-1]).body,
                      ErrorReply)
    # nothing half-applied: no screen was recorded for m1, and the actor still answers
    assert router.resolve(0).reason == "no_heartbeat"
    assert isinstance(router.call(Ping()), Pong)


def test_agent_heartbeats_feed_the_router(spawn: Spawn, lea_env: dict[str, str],
                                          tmp_path: Path) -> None:
    """A simulated agent declaring a monitor left of its primary: the router learns its
    screen from the agent's own heartbeats and routes on it."""
    lea_env["LEA_MONITOR_HEARTBEAT_INTERVAL_S"] = "0.3"
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"desktop": {
        "window_title": "Imagerie — Easily",
        "monitors": [{"x": -1280, "y": 0, "w": 1280, "h": 1024, "name": "LEFT"},
                     {"x": 0, "y": 0, "w": 1920, "h": 1080, "primary": True,
                      "name": "MAIN"}],
        "focused_monitor": 1}}))
    spawn(python_argv("-m", "broker"), env=lea_env, name="broker")
    spawn(python_argv("-m", "agent", "--machine-id", "W1", "--scenario", str(scenario)),
          env=lea_env, name="agent")
    time.sleep(1.0)  # the agent heartbeats into the void first: it must shrug that off
    spawn(python_argv("-m", "actors", "monitor_router"), env=lea_env, name="monitor_router")
    r = Router(lea_env)
    try:
        status = wait_until(lambda: _agents(r, "W1"), 15)
        assert isinstance(status, list)
        screen = status[0]
        assert [(m.idx, m.x, m.name, m.primary) for m in screen.monitors_geometry] == [
            (0, 0, "MAIN", True), (1, -1280, "LEFT", False)]
        assert screen.monitor_index == 1
        assert screen.active_window_title == "Imagerie — Easily"
        t = r.resolve(None, machine_id="W1")
        assert (t.idx, t.offset_x, t.source) == (1, -1280, "focus")
        t = r.resolve(0, machine_id="W1")
        assert (t.idx, t.offset_x, t.w, t.source) == (0, 0, 1920, "action")
    finally:
        r.close()


def _agents(r: Router, machine_id: str) -> list[Any] | None:
    try:
        reply = r.call(MonitorStatus(machine_id=machine_id))
    except Exception:
        return None
    return reply.agents if isinstance(reply, MonitorStatusReply) and reply.agents else None


class _Screen:
    """A screen whose focus the test moves (the probe interface of agent/screen/probe.py)."""

    def __init__(self) -> None:
        self.state: tuple[int | None, str | None] = (0, "Accueil")  # replaced whole

    def monitors(self) -> list[Monitor]:
        return THREE

    def focus(self, monitors: list[Monitor]) -> tuple[int | None, str | None]:
        return self.state


def test_a_focus_change_is_sent_at_once_not_at_the_next_interval(router: Router) -> None:
    """Interval 60 s: only the first heartbeat and the change-driven ones can arrive."""
    from agent.link.heartbeat import HeartbeatConfig, Heartbeats
    from transport.client import Client

    client = Client(router.ctx, router.client_endpoint)
    screen = _Screen()
    beats = Heartbeats("m9", client, screen, HeartbeatConfig(interval_s=60, poll_s=0.05))
    beats.start()

    def pump_until(predicate: Any) -> None:
        def step() -> bool:
            client.drain()
            client.tick()
            beats.tick(time.monotonic())
            status = router.call(MonitorStatus(machine_id="m9"))
            return isinstance(status, MonitorStatusReply) and bool(status.agents) and \
                predicate(status.agents[0])
        wait_until(step, 10)

    try:
        pump_until(lambda a: a.monitor_index == 0 and a.active_window_title == "Accueil")
        screen.state = (2, "Imagerie")
        pump_until(lambda a: a.monitor_index == 2 and a.active_window_title == "Imagerie")
        assert router.resolve(None, machine_id="m9").offset_x == 1920
        assert beats.sent == 2
    finally:
        beats.stop()
        client.close()

"""Issue 7 item 6: with CURVE, an agent is known by the key it came with, and can do no more
than its own machine's work (docs/protocol.md).

Each test runs a CURVE tree whose allow-list has ``victim`` and ``rogue``. A rogue that
registers as ``agent.victim`` is refused by the broker; one that reports for the victim's
action (naming the victim, or itself) is refused by the dispatcher and recorded; one that
sends replay control commands is refused ``forbidden``; the victim's replay goes on
untouched. Everything is a real process; the rogue client here is a plain CURVE socket.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from messages.audit import AuditPage, AuditQuery, AuditRecordOut
from messages.base import Message
from messages.dispatch import (
    ActionReport,
    ClaimAttempt,
    DispatchAction,
    DispatchMeta,
    ListInFlight,
)
from messages.replay import (
    CancelReplay,
    PauseReplay,
    ReplayStarted,
    ResumeReplay,
    StartReplay,
)
from tests.conftest import ROOT, Spawn, free_port, python_argv, wait_until
from tests.integration.probes import serves
from tests.integration.system import Agent, System, clicks, workflow
from tests.integration.transport_checks import (
    Bus,
    assert_client_invariants,
    reports,
    wait_ready,
)
from transport import mdp
from transport.client import CallFailed, SyncClient
from transport.curve_keys import KeyLayout, read_key_file
from transport.peer_id import identity_of
from transport.worker import SocketSetup


def curve_setup(keys: Path, name: str) -> SocketSetup:
    """Socket options of a CURVE client holding agent ``name``'s key pair."""
    layout = KeyLayout(keys)
    server_public, _ = read_key_file(layout.server_public)
    public, secret = read_key_file(layout.agent_secret(name), secret=True)
    assert secret is not None

    def setup(sock: zmq.Socket[Any]) -> None:
        sock.setsockopt(zmq.CURVE_SERVERKEY, server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, secret)

    return setup


class CurveTree:
    """A tree with CURVE on, the keys of ``victim`` and ``rogue`` allowed, and a bus tap."""

    def __init__(self, spawn: Spawn, env: dict[str, str], tmp: Path) -> None:
        self.keys = tmp / "keys"
        subprocess.run(python_argv("run.py", "keys", "generate", "--dir", str(self.keys),
                                   "--agent", "victim", "--agent", "rogue", "--allow"),
                       cwd=ROOT, check=True, capture_output=True)
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.system = System(spawn, env, tmp, {
            "LEA_CURVE": "1", "LEA_CURVE_ENDPOINT": self.endpoint,
            "LEA_KEYS_DIR": str(self.keys),
            "RPA_LOOP_DETECTOR_ENABLED": "0"})  # not what these tests are about
        self.bus = Bus(self.system.env)
        self.tmp = tmp

    def victim(self) -> Agent:
        agent = self.system.agent("victim", extra_args=["--curve"])
        wait_ready(self.system, agent)
        return agent

    def rogue_client(self) -> SyncClient:
        """A CURVE client holding the rogue's (allowed) key."""
        return SyncClient(self.endpoint, zmq.Context.instance(),
                          curve_setup(self.keys, "rogue"))

    def audit(self, kind: str, count: int = 1, **match: Any) -> list[AuditRecordOut]:
        """The audit records of ``kind`` whose data has every ``match`` item, once there are
        ``count`` of them (records reach audit_log a little after the decision)."""
        wait_until(lambda: len(self._audit(kind, **match)) >= count, timeout=15)
        return self._audit(kind, **match)

    def _audit(self, kind: str, **match: Any) -> list[AuditRecordOut]:
        found: list[AuditRecordOut] = []
        after: int | None = 0
        while after is not None:
            page = self.system.call("audit_log", AuditQuery(after_seq=after, limit=1000))
            assert isinstance(page, AuditPage), page
            found += [r for r in page.records if r.kind == kind
                      and all(r.data.get(k) == v for k, v in match.items())]
            after = page.next_seq
        return found


@pytest.fixture
def tree(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> Iterator[CurveTree]:
    t = CurveTree(spawn, lea_env, tmp_path)
    try:
        yield t
    finally:
        t.bus.close()


def refused(client: SyncClient, service: str, message: Message) -> str:
    """The error code ``service`` refused ``message`` with (the test fails if it did not)."""
    with pytest.raises(CallFailed) as info:
        client.call(service, message, timeout_s=5.0, retries=0)
    return info.value.code


def test_a_rogue_worker_cannot_take_another_machines_actions(tree: CurveTree) -> None:
    system = tree.system
    broker_pid = system.child_pid("broker")
    victim = tree.victim()
    # An allowed key ('rogue') that says it is the victim: its READY for agent.victim is
    # refused; its hello and heartbeats (naming the victim) are refused too.
    rogue_dir = tree.tmp / "rogue"
    rogue = system.spawn(python_argv(
        "-m", "agent", "--machine-id", "victim", "--data-dir", str(rogue_dir / "data"),
        "--effects-log", str(rogue_dir / "effects.jsonl"), "--curve",
        "--agent-key", str(KeyLayout(tree.keys).agent_secret("rogue"))),
        env=system.env, name="rogue")
    event = tree.bus.wait_for("lea:worker_refused", timeout=15, user_id="rogue")
    assert event.data["service"] == "agent.victim"
    tree.bus.wait_for("lea:sender_refused", timeout=15, identity="rogue", type="agent.hello",
                      code="wrong_machine", service="dispatcher")
    tree.bus.wait_for("lea:sender_refused", timeout=15, identity="rogue",
                      type="monitor.heartbeat", code="wrong_machine")

    steps = 8
    rid = system.start(workflow(*clicks(steps)), "victim")
    system.wait_status(rid, "completed", timeout=40)
    ids = [f"s{i}" for i in range(steps)]
    assert_client_invariants(system, victim, ids)  # every step by the victim, once each
    assert [r.status for r in reports(system, rid)] == ["accepted"] * steps
    assert not (rogue_dir / "effects.jsonl").exists() or not (
        rogue_dir / "effects.jsonl").read_text().strip()
    hello = tree.audit("request_refused", type="agent.hello", identity="rogue")
    assert hello and hello[0].data["code"] == "wrong_machine"
    assert hello[0].data["machine_id"] == "victim"
    assert rogue.poll() is None and system.child_pid("broker") == broker_pid


def test_a_rogue_report_or_control_command_changes_nothing_and_is_recorded(
        tree: CurveTree) -> None:
    system = tree.system
    reply = system.call("dispatcher", StartReplay(workflow=workflow(*clicks(3)),
                                                  machine_id="victim", operator="alice"))
    assert isinstance(reply, ReplayStarted), reply
    rid = reply.replay_id  # the victim is not up yet: its first action waits in flight
    inflight = system.wait_inflight(rid)
    before = system.status(rid)
    rogue = tree.rogue_client()
    try:
        report = ActionReport(replay_id=rid, session_id=before.session_id, machine_id="victim",
                              action_id=inflight.action_id, attempt_id=inflight.attempt_id,
                              success=True)
        # Its own identity, the body naming the victim; then naming itself.
        assert refused(rogue, "dispatcher", report) == "wrong_machine"
        as_itself = report.model_copy(update={"machine_id": "rogue"})
        assert refused(rogue, "dispatcher", as_itself) == "wrong_machine"
        claim = ClaimAttempt(replay_id=rid, machine_id="victim",
                             action_id=inflight.action_id, attempt_id=inflight.attempt_id)
        assert refused(rogue, "dispatcher", claim) == "wrong_machine"
        # Agents report; people control.
        for command in (ResumeReplay(replay_id=rid, operator="mallory"),
                        CancelReplay(replay_id=rid, operator="mallory"),
                        PauseReplay(replay_id=rid, operator="mallory"),
                        StartReplay(workflow=workflow(*clicks(1)), machine_id="victim",
                                    operator="mallory")):
            assert refused(rogue, "dispatcher", command) == "forbidden"
        assert refused(rogue, "dispatcher", ListInFlight()) == "forbidden"
        assert refused(rogue, "audit_log", AuditQuery()) == "forbidden"

        after = system.status(rid)
        assert (after.status, after.completed_actions) == (before.status, 0)
        still = system.inflight_of(rid)
        assert still is not None and still.attempt_id == inflight.attempt_id
        logged = reports(system, rid)
        assert [r.status for r in logged] == ["refused", "refused"]
        records = tree.audit("report_refused", 2, replay_id=rid)
        assert {(r.data["sender_machine"], r.data["claimed_machine"]) for r in records} == {
            ("rogue", "victim"), ("rogue", "rogue")}
        control = tree.audit("request_refused", 3, replay_id=rid, code="forbidden")
        assert {r.data["type"] for r in control} == {
            "replay.resume", "replay.cancel", "replay.pause"}
        assert all(r.data["operator"] == "mallory" and r.data["identity"] == "rogue"
                   for r in control)
        assert tree.audit("request_refused", type="replay.start", identity="rogue")
        tree.bus.wait_for("lea:sender_refused", timeout=10, identity="rogue",
                          type="replay.cancel", code="forbidden")

        # The victim comes up and does its replay; the rogue cannot make it click.
        victim = tree.victim()
        system.wait_status(rid, "completed", timeout=30)
        assert_client_invariants(system, victim, ["s0", "s1", "s2"])
        # Nor make it click: actions come from the dispatcher (a local peer) only.
        forged = DispatchAction(
            replay_id="forged", session_id="forged", machine_id="victim",
            action=workflow(*clicks(1)).actions[0], attempt_id="f" * 32,
            dispatch_meta=DispatchMeta(first_dispatched_at=0.0))
        assert refused(rogue, "agent.victim", forged) == "forbidden"
        assert victim.executed("s0") == 1 and len(victim.effects()) == 3
    finally:
        rogue.close()
    # The operator's own commands (the plain loopback door) are recorded with the operator.
    started = tree.audit("replay_started", replay_id=rid)
    assert started and started[0].data["operator"] == "alice"


def test_workers_never_see_routing_ids_and_none_can_be_taken_over(tree: CurveTree) -> None:
    """A worker that learnt the routing id of another peer could claim it when it connects
    (majordomo.py): the addresses it is given are keyed hashes, and a CURVE peer that claims
    a routing id in use gets nothing of that peer's traffic."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    setup = curve_setup(tree.keys, "rogue")
    worker: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)  # a hand-written agent.rogue
    setup(worker)
    worker.connect(tree.endpoint)
    worker.send_multipart(mdp.worker_ready(b"agent.rogue"))
    local: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)  # a local client with a known id
    local.setsockopt(zmq.ROUTING_ID, b"operator-console")
    local.connect(tree.system.env["LEA_MDP_ENDPOINT"])
    thief: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)
    for sock in (worker, local, thief):
        sock.setsockopt(zmq.LINGER, 0)
    try:
        wait_until(lambda: serves(tree.system.client, "agent.rogue"), timeout=15)
        local.send_multipart(mdp.client_request(b"agent.rogue", b"ping-1"))
        assert worker.poll(10_000)
        frames = _skip_heartbeats(worker)
        address = frames[2]
        assert b"operator-console" not in address and identity_of(address) is None
        worker.send_multipart(mdp.worker_reply(address, b"pong-1"))
        assert local.poll(10_000) and local.recv_multipart()[3] == b"pong-1"

        # The rogue claims the console's routing id on the CURVE door: nothing changes hands.
        setup(thief)
        thief.setsockopt(zmq.ROUTING_ID, b"operator-console")
        thief.connect(tree.endpoint)
        thief.send_multipart(mdp.client_request(b"mmi.service", b"dispatcher"))
        local.send_multipart(mdp.client_request(b"agent.rogue", b"ping-2"))
        assert worker.poll(10_000)
        address = _skip_heartbeats(worker)[2]
        worker.send_multipart(mdp.worker_reply(address, b"pong-2"))
        assert local.poll(10_000) and local.recv_multipart()[3] == b"pong-2"
        assert not thief.poll(500)
    finally:
        for sock in (worker, local, thief):
            sock.close()


def _skip_heartbeats(worker: zmq.Socket[bytes]) -> list[bytes]:
    """The next REQUEST the broker sends a raw worker."""
    while True:
        frames = worker.recv_multipart()
        if frames[1] == mdp.W_REQUEST:
            return frames
        assert worker.poll(10_000)

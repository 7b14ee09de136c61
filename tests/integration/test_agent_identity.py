"""Every agent proves who it is, whatever the path, and the actors' services
are the tree's alone.

A real sshd on 127.0.0.1 lets agents forward to the broker's CURVE port only (as the
``authorized_keys`` line of docs/remote-agents.md does); inside the tunnel each agent speaks
CURVE with its own key. Checked: an agent holding WS12's key that says it is WS13 is refused
(``worker_refused`` at the broker, ``wrong_machine`` at the dispatcher), both refusals are in
the audit trail, and nothing of WS13 changes; a hand-made peer (plain pyzmq, RFC 18 frames) that
sends READY for ``dispatcher`` or ``audit_log`` through that tunnel, or on the plain loopback
endpoint, is refused and recorded, and real requests to those services all reach the real
actors.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from agent.link.tunnel import Tunnel, TunnelSpec, free_local_port, parse_target
from messages.audit import AuditPage, AuditQuery
from messages.dispatch import InFlightList, ListInFlight
from tests.conftest import ROOT, Spawn, free_port, python_argv, wait_until
from tests.integration.sshd import Sshd, start_sshd
from tests.integration.system import System, clicks, workflow
from tests.integration.trail_checks import export_all
from tests.integration.transport_checks import (
    Bus,
    agent_log,
    assert_client_invariants,
    reports,
    wait_ready,
    wait_registered,
)
from transport import mdp
from transport.curve_keys import KeyLayout, read_key_file


class SshCurveTree:
    """A CURVE tree on loopback (WS12 and WS13 allowed), an sshd that forwards to its CURVE
    port only, and a bus tap."""

    def __init__(self, spawn: Spawn, env: dict[str, str], tmp: Path) -> None:
        self.keys = tmp / "keys"
        subprocess.run(python_argv("run.py", "keys", "generate", "--dir", str(self.keys),
                                   "--agent", "WS12", "--agent", "WS13", "--allow"),
                       cwd=ROOT, check=True, capture_output=True)
        self.curve_port = free_port()
        self.sshd: Sshd = start_sshd(spawn, tmp, self.curve_port)
        self.system = System(spawn, env, tmp, {
            "LEA_CURVE": "1", "LEA_CURVE_ENDPOINT": f"tcp://127.0.0.1:{self.curve_port}",
            "LEA_KEYS_DIR": str(self.keys),
            "RPA_LOOP_DETECTOR_ENABLED": "0",  # identical clicks: not a loop, here
            # WS13's first action waits for WS13 as long as the test needs: only what the
            # impostor does may change it, not the watchdog giving up on a missing agent.
            "RPA_WATCHDOG_ENABLED": "0"})
        self.bus = Bus(self.system.env)

    def audit(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        """The trail's records of ``kind`` whose data has every ``match`` item, once there is
        one (the broker's reach audit_log through the supervisor's outbox)."""
        def found() -> list[dict[str, Any]]:
            return [r for r in export_all(self.system.env) if r["kind"] == kind
                    and all(r["data"].get(k) == v for k, v in match.items())]
        wait_until(found, timeout=20, interval=0.5)
        return found()

    def tunnel(self) -> Tunnel:
        """An ssh -L of our own to the CURVE port, as an agent's (agent/link/tunnel.py)."""
        tunnel = Tunnel(TunnelSpec(
            target=parse_target(self.sshd.target), local_port=free_local_port(),
            remote_host="127.0.0.1", remote_port=self.curve_port,
            key_file=self.sshd.client_key, known_hosts=self.sshd.known_hosts))
        tunnel.start()
        return tunnel


@pytest.fixture
def tree(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> Iterator[SshCurveTree]:
    t = SshCurveTree(spawn, lea_env, tmp_path)
    try:
        yield t
    finally:
        t.bus.close()


def test_an_agent_with_ws12s_key_through_ssh_cannot_speak_for_ws13(tree: SshCurveTree) -> None:
    system = tree.system
    steps = 4
    rid = system.start(workflow(*clicks(steps)), "WS13")
    first = system.wait_inflight(rid)  # WS13 is not up yet: its first action waits
    before = system.status(rid)

    # The impostor: WS13's name, WS12's key, through the SSH tunnel (which implies CURVE).
    base = system.tmp / "impostor"
    effects = base / "effects.jsonl"
    impostor = system.spawn(python_argv(
        "-m", "agent", "--machine-id", "WS13", "--data-dir", str(base / "data"),
        "--effects-log", str(effects), *tree.sshd.agent_args(),
        "--agent-key", str(KeyLayout(tree.keys).agent_secret("WS12"))),
        env=system.env, name="impostor")

    def impostor_inputs() -> str:
        return effects.read_text() if effects.exists() else ""

    refused = tree.bus.wait_for("lea:worker_refused", timeout=30, user_id="WS12")
    assert refused.data["service"] == "agent.WS13" and refused.data["door"] == "curve"
    tree.bus.wait_for("lea:sender_refused", timeout=30, identity="WS12", type="agent.hello",
                      code="wrong_machine")
    records = tree.audit("worker_refused", user_id="WS12", service="agent.WS13")
    assert records[0]["source"] == "broker"
    hello = tree.audit("request_refused", type="agent.hello", identity="WS12")
    assert hello[0]["data"]["code"] == "wrong_machine"
    assert hello[0]["data"]["machine_id"] == "WS13"

    # Nothing of WS13 changed: same status, same attempt in flight, no report, no input.
    after = system.status(rid)
    assert (after.status, after.completed_actions) == (before.status, before.completed_actions)
    still = system.inflight_of(rid)
    assert still is not None and still.attempt_id == first.attempt_id
    assert reports(system, rid) == []
    assert impostor_inputs() == ""
    wait_registered(system, "WS13", present=False)
    assert impostor.poll() is None  # it is told no, it is not crashed

    # The real WS13, through the same sshd with its own key, does its replay, alone.
    real = system.agent("WS13", extra_args=tree.sshd.agent_args())
    wait_ready(system, real)
    served = agent_log(real)
    assert f"127.0.0.1:{tree.curve_port}" in served  # its tunnel goes to the CURVE port
    system.wait_status(rid, "completed", timeout=60)
    assert_client_invariants(system, real, [f"s{i}" for i in range(steps)])
    # One accepted report per step (a report re-sent after a lost ack shows as 'duplicate');
    # none refused: nothing came from the impostor.
    logged = reports(system, rid)
    assert sorted(r.action_id for r in logged if r.status == "accepted") == [
        f"s{i}" for i in range(steps)]
    assert {r.status for r in logged} <= {"accepted", "duplicate"}
    assert impostor_inputs() == ""


class RogueWorker:
    """A hand-made MDP worker (plain pyzmq DEALER, RFC 18 frames) asking to serve
    ``service``; ``setup`` puts CURVE keys on it when it comes through the agents' door."""

    def __init__(self, endpoint: str, service: bytes,
                 curve: tuple[bytes, bytes, bytes] | None = None) -> None:
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            server, public, secret = curve
            self.sock.setsockopt(zmq.CURVE_SERVERKEY, server)
            self.sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
            self.sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
        self.sock.connect(endpoint)
        self.sock.send_multipart(mdp.worker_ready(service))
        self.got: list[list[bytes]] = []

    def collect(self, seconds: float) -> list[list[bytes]]:
        """Everything the broker sent it for ``seconds``, answering HEARTBEAT as a live
        worker would (so that only a refusal, never silence, keeps work from it)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000) + 1):
                frames = self.sock.recv_multipart()
                self.got.append(frames)
                if frames[:2] == [mdp.WORKER, mdp.W_HEARTBEAT]:
                    self.sock.send_multipart([mdp.WORKER, mdp.W_HEARTBEAT])
        return self.got

    def close(self) -> None:
        self.sock.close(0)


def test_no_peer_but_the_trees_own_may_serve_an_actors_service(tree: SshCurveTree) -> None:
    system = tree.system
    layout = KeyLayout(tree.keys)
    server, _ = read_key_file(layout.server_public)
    public, secret = read_key_file(layout.agent_secret("WS12"), secret=True)
    assert secret is not None
    tunnel = tree.tunnel()
    rogues = {
        # Through the agents' path: the SSH tunnel to the CURVE port, WS12's (allowed) key.
        "ssh_dispatcher": RogueWorker(tunnel.spec.local_endpoint, b"dispatcher",
                                      (server, public, secret)),
        "ssh_audit_log": RogueWorker(tunnel.spec.local_endpoint, b"audit_log",
                                     (server, public, secret)),
        # And on the plain loopback endpoint, which every local account can reach.
        "plain_dispatcher": RogueWorker(system.env["LEA_MDP_ENDPOINT"], b"dispatcher"),
        "plain_audit_log": RogueWorker(system.env["LEA_MDP_ENDPOINT"], b"audit_log"),
    }
    try:
        for service in ("dispatcher", "audit_log"):
            tree.bus.wait_for("lea:worker_refused", timeout=30, service=service,
                              user_id="WS12", door="curve")
            tree.bus.wait_for("lea:worker_refused", timeout=30, service=service,
                              user_id="", door="loopback")
            assert tree.audit("worker_refused", service=service, door="curve",
                              user_id="WS12")
            assert tree.audit("worker_refused", service=service, door="loopback")

        # Real requests to those services: every one is answered by the real actor.
        dispatcher_pid, audit_pid = system.pid("dispatcher"), system.pid("audit_log")
        for _ in range(10):
            assert isinstance(system.call("dispatcher", ListInFlight()), InFlightList)
            assert isinstance(system.call("audit_log", AuditQuery(limit=1)), AuditPage)
        assert (system.pid("dispatcher"), system.pid("audit_log")) == (dispatcher_pid,
                                                                      audit_pid)
        # The rogues were told DISCONNECT (RFC 18) and were given nothing else.
        for name, rogue in rogues.items():
            got = rogue.collect(2.0)
            assert got and got[0] == [mdp.WORKER, mdp.W_DISCONNECT], (name, got)
            assert all(f[:2] != [mdp.WORKER, mdp.W_REQUEST] for f in got), name
    finally:
        for rogue in rogues.values():
            rogue.close()
        tunnel.stop()

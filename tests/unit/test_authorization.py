"""Who may ask what (docs/protocol.md), below the processes: the identity in a client address,
the actors' refusals, the core's refusal of a report that speaks for another machine, and a
worker that backs off when the broker keeps refusing its READY.

The broker's side (a CURVE peer's READY for another's service, the address it writes) needs
real CURVE connections: tests/integration/test_authorization.py.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.auth

from actors import callers
from actors.dispatcher.machine.decision import AuditRecord, RecordReport
from actors.dispatcher.process import DispatcherActor
from actors.monitor_router.process import MonitorRouterActor
from broker.curve_listener import AllowList
from messages.base import Message
from messages.codec import decode, encode
from messages.control import ErrorReply, Ping, Pong
from messages.dispatch import ActionReport, OrphanGiveUp
from messages.monitor import AgentHeartbeat
from messages.replay import Ack, CancelReplay, ResumeReplay
from runtime.settings import Settings
from tests.conftest import free_port
from tests.unit.test_dispatcher_core import H, error_code, unchanged, wf
from transport import mdp
from transport.peer_id import TREE_USER_ID, client_address, identity_of, person_user_id
from transport.worker import Request, Worker

LOCAL = b"\x00\x6b\x8b\x45\x67"  # a routing id as libzmq makes them


# The address the broker gives a worker --------------------------------------------------------

@pytest.mark.parametrize(("routing", "user_id", "address", "identity"), [
    (LOCAL, "rogue", b"id:rogue\x00" + LOCAL, "rogue"),
    (LOCAL, None, LOCAL, None),
    # A local peer may choose a routing id that looks like an identity: escaped.
    (b"id:victim\x00x", None, b"id:\x00id:victim\x00x", None),
    # A CURVE peer that chose one: its own identity comes first.
    (b"id:victim\x00x", "rogue", b"id:rogue\x00id:victim\x00x", "rogue"),
])
def test_the_client_address_carries_the_authenticated_identity(
        routing: bytes, user_id: str | None, address: bytes, identity: str | None) -> None:
    assert client_address(routing, user_id) == address
    assert identity_of(address) == identity


def test_an_address_the_broker_did_not_write_names_nobody() -> None:
    assert identity_of(b"id:victim") is None  # no NUL: not one of ours
    assert identity_of(b"") is None


# Actors refuse what an agent may not ask ------------------------------------------------------

def _settings(tmp: Path) -> Settings:
    return Settings(mdp_endpoint=f"tcp://127.0.0.1:{free_port()}",
                    bus_in_endpoint=f"tcp://127.0.0.1:{free_port()}", data_dir=tmp / "var")


def _ask(serve: Any, message: Message, user_id: str | None) -> Message:
    raw = serve(Request(client=client_address(LOCAL, user_id), body=[encode(message)]))
    return decode(raw).body


@pytest.fixture
def dispatcher(tmp_path: Path) -> Iterator[DispatcherActor]:
    actor = DispatcherActor(_settings(tmp_path))
    try:
        yield actor
    finally:
        actor.on_stop()
        actor.close()


def test_a_control_command_from_an_agent_is_forbidden_and_recorded(
        dispatcher: DispatcherActor) -> None:
    for command in (ResumeReplay(replay_id="r1", operator="mallory"),
                    CancelReplay(replay_id="r1", operator="mallory")):
        reply = _ask(dispatcher.serve, command, "m1")
        assert isinstance(reply, ErrorReply) and reply.code == "forbidden", reply
    records = [e for _i, e in dispatcher.store.pending_outbox()
               if isinstance(e, AuditRecord) and e.kind == "request_refused"]
    assert [(r.data["type"], r.data["identity"], r.data["operator"], r.data["replay_id"])
            for r in records] == [("replay.resume", "m1", "mallory", "r1"),
                                  ("replay.cancel", "m1", "mallory", "r1")]
    # The tree (the console) and the tree's own OS account at the people's door: looked at.
    for caller in (TREE_USER_ID, person_user_id(os.getuid())):
        reply = _ask(dispatcher.serve, CancelReplay(replay_id="r1", operator="alice"), caller)
        assert isinstance(reply, ErrorReply) and reply.code == "not_found", (caller, reply)
    # A peer of the plain loopback endpoint: nothing says who it is, so it changes nothing.
    reply = _ask(dispatcher.serve, CancelReplay(replay_id="r1", operator="alice"), None)
    assert isinstance(reply, ErrorReply) and reply.code == "forbidden", reply
    assert isinstance(_ask(dispatcher.serve, Ping(), "m1"), Pong)  # agents may ping


def test_a_person_may_not_claim_an_account_a_role_or_another_os_user(
        dispatcher: DispatcherActor) -> None:
    me = person_user_id(os.getuid())
    for forged in ({"account": "dr.martin"}, {"role": "operator"}, {"os_user": "dr.martin"}):
        reply = _ask(dispatcher.serve, ResumeReplay(replay_id="r1", **forged), me)
        assert isinstance(reply, ErrorReply) and reply.code == "forged_claim", (forged, reply)
    # The console (the tree) names the signed-in account: looked at.
    reply = _ask(dispatcher.serve, ResumeReplay(replay_id="r1", account="dr.martin",
                                                role="operator"), TREE_USER_ID)
    assert isinstance(reply, ErrorReply) and reply.code == "not_found", reply


def test_the_watchdogs_orders_come_from_the_tree_only(dispatcher: DispatcherActor) -> None:
    order = OrphanGiveUp(action_id="a1", attempt_id="t1", age_s=99.0, resent_count=2)
    for caller in (None, person_user_id(os.getuid())):
        reply = _ask(dispatcher.serve, order, caller)
        assert isinstance(reply, ErrorReply) and reply.code == "forbidden", (caller, reply)
    assert not isinstance(_ask(dispatcher.serve, order, TREE_USER_ID), ErrorReply)


@pytest.mark.parametrize(("uid", "group", "groups", "allowed"), [
    (1000, "", frozenset(), True),  # the tree's own account
    (1001, "", frozenset({"lea-ops"}), False),  # no group set: the tree's account alone
    (1001, "lea-ops", frozenset({"users"}), False),
    (1001, "lea-ops", frozenset({"users", "lea-ops"}), True),
])
def test_who_may_change_is_the_trees_account_or_the_control_group(
        uid: int, group: str, groups: frozenset[str], allowed: bool) -> None:
    why = callers.control_refusal(uid, "bob", 1000, group, groups)
    assert (why is None) == allowed, why
    if why is not None:
        assert "'bob'" in why and f"uid {uid}" in why


def test_a_report_from_an_agent_for_another_machine_is_refused_and_logged(
        dispatcher: DispatcherActor) -> None:
    report = ActionReport(replay_id="r9", session_id="s", machine_id="victim",
                          action_id="a1", attempt_id="t1", success=True)
    reply = _ask(dispatcher.serve, report, "rogue")
    assert isinstance(reply, ErrorReply) and reply.code == "wrong_machine"
    (logged,) = dispatcher.store.reports("r9")
    assert (logged["status"], logged["sender_machine"]) == ("refused", "rogue")
    # Without CURVE the body's machine_id stands for the sender (docs/remote-agents.md, "Who may
    # do what").
    reply = _ask(dispatcher.serve, report, None)
    assert not isinstance(reply, ErrorReply), reply


def test_an_agent_sends_heartbeats_for_its_own_screen_only(tmp_path: Path) -> None:
    actor = MonitorRouterActor(_settings(tmp_path))
    try:
        beat = AgentHeartbeat(machine_id="victim", at=1.0)
        reply = _ask(actor.serve, beat, "rogue")
        assert isinstance(reply, ErrorReply) and reply.code == "wrong_machine"
        assert "victim" not in actor.core.agents
        assert isinstance(_ask(actor.serve, beat, "victim"), Ack)
        assert "victim" in actor.core.agents
    finally:
        actor.close()


def test_the_core_refuses_a_sender_that_is_not_the_reports_machine() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    before = h.status(rid)
    # An action nobody dispatched: without an authenticated sender it is only "unknown";
    # from an agent that is not the body's machine it is refused.
    msg = h.report_msg(rid, action_id="nope", attempt="x")
    d = h.send_report(msg, sender="rogue")
    assert error_code(d) == "wrong_machine"
    unchanged(d)
    refused = [e for e in d.effects if isinstance(e, RecordReport)]
    assert [(r.status, r.sender_machine) for r in refused] == [("refused", "rogue")]
    assert h.status(rid) == before


# A worker refused at READY backs off ----------------------------------------------------------

def test_a_worker_whose_ready_is_refused_backs_off() -> None:
    ctx: zmq.Context[Any] = zmq.Context.instance()
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    broker: zmq.Socket[bytes] = ctx.socket(zmq.ROUTER)
    broker.setsockopt(zmq.LINGER, 0)
    broker.bind(endpoint)
    readies: list[float] = []
    stop = threading.Event()

    def refuse_every_ready() -> None:  # a broker that will not have this worker
        while not stop.is_set():
            if broker.poll(50):
                frames = broker.recv_multipart()
                if frames[1:3] == [mdp.WORKER, mdp.W_READY]:
                    readies.append(time.monotonic())
                    broker.send_multipart([frames[0], mdp.WORKER, mdp.W_DISCONNECT])

    thread = threading.Thread(target=refuse_every_ready, daemon=True)
    thread.start()
    worker = Worker(ctx, endpoint, "agent.victim", heartbeat_interval_s=0.25)
    try:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            if worker.socket.poll(20):
                worker.drain()
            worker.tick()
    finally:
        stop.set()
        thread.join()
        worker.close()
        broker.close()
    # Without the backoff: a READY every few ms. With it: 0.1, 0.2, 0.4, 0.8 s apart.
    assert 3 <= len(readies) <= 6, readies
    gaps = [b - a for a, b in pairwise(readies)]
    assert all(later > earlier for earlier, later in pairwise(gaps)), gaps
    assert worker.refusals >= 3


def test_an_allow_list_file_without_a_name_lets_nobody_in(tmp_path: Path) -> None:
    """The file's name is the agent's identity: an empty one would name nobody (and an
    empty identity must never pass for a local peer)."""
    zmq.auth.create_certificates(tmp_path, "")  # writes ".key"
    zmq.auth.create_certificates(tmp_path, "ws12")
    allow = AllowList(tmp_path)
    allow.refresh()
    assert len(allow) == 1
    assert any("must name the agent" in p for p in allow.problems)

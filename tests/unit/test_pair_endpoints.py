"""Peers given the two brokers of a pair (transport/client.py, transport/worker.py) move to the
other where they would retry; with one endpoint they behave as before. The brokers are two
ROUTER sockets speaking MDP: one silent (dead or passive), one answering. Also the pair's
state messages (broker/pair_link.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import zmq

from broker.binary_star import Role, State
from broker.pair_link import parse_state
from messages.codec import Envelope, decode, encode
from messages.control import Ping, Pong
from transport import mdp
from transport.client import CallFailed, Client, SyncClient
from transport.worker import Worker

Reply = tuple[Envelope[Any] | None, CallFailed | None]


@pytest.fixture
def ctx() -> Any:
    c: zmq.Context[Any] = zmq.Context()
    yield c
    c.destroy(linger=0)


def router(ctx: zmq.Context[Any], name: str) -> zmq.Socket[bytes]:
    sock: zmq.Socket[bytes] = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"inproc://{name}")
    return sock


def received(sock: zmq.Socket[bytes], timeout_ms: int = 2000) -> list[bytes] | None:
    return sock.recv_multipart() if sock.poll(timeout_ms) else None


def answer(sock: zmq.Socket[bytes], frames: list[bytes]) -> None:
    """Reply to a client REQUEST (routing id, MDPC02, 0x01, service, body) with a Pong."""
    envelope = decode(frames[4])
    reply = encode(Pong(service="x", pid=1, started_at=0.0), envelope.id)
    sock.send_multipart([frames[0], mdp.CLIENT, mdp.C_FINAL, frames[3], reply])


def test_client_moves_to_the_other_broker_when_a_request_gets_no_answer(ctx: Any) -> None:
    a, b = router(ctx, "a"), router(ctx, "b")
    client = Client(ctx, ["inproc://a", "inproc://b"])
    replies: list[Reply] = []
    client.call("svc", Ping(), lambda r, e: replies.append((r, e)), timeout_s=0.05, retries=2)
    first = received(a)
    assert first is not None and client.endpoint == "inproc://a"
    client.tick(time.monotonic() + 0.1)  # a stays silent past the timeout
    assert client.endpoint == "inproc://b"
    again = received(b)
    assert again is not None and again[2:] == first[2:]  # the same request, same id
    answer(b, again)
    assert b.poll(0) == 0
    deadline = time.monotonic() + 2
    while not replies and time.monotonic() < deadline:
        client.socket.poll(100)
        client.drain()
    assert replies and isinstance(replies[0][0].body, Pong)  # type: ignore[union-attr]
    client.close()


def test_client_does_not_move_when_its_broker_answered_since(ctx: Any) -> None:
    """A broker that answers other requests is alive: a slow service is no failover."""
    a = router(ctx, "a")
    router(ctx, "b")
    client = Client(ctx, ["inproc://a", "inproc://b"])
    client.call("slow", Ping(), lambda r, e: None, timeout_s=0.05, retries=2)
    client.call("fast", Ping(), lambda r, e: None, timeout_s=5, retries=0)
    slow, fast = received(a), received(a)
    assert slow is not None and fast is not None
    answer(a, fast)
    client.socket.poll(2000)
    client.drain()
    client.tick(time.monotonic() + 0.1)
    assert client.endpoint == "inproc://a"
    assert received(a) is not None  # the slow request sent again, to the same broker
    client.close()


def test_client_with_one_endpoint_retries_on_the_same_socket(ctx: Any) -> None:
    a = router(ctx, "a")
    client = Client(ctx, "inproc://a")
    sock = client.socket
    client.call("svc", Ping(), lambda r, e: None, timeout_s=0.05, retries=1)
    assert received(a) is not None
    client.tick(time.monotonic() + 0.1)
    assert client.socket is sock and client.endpoint == "inproc://a"
    assert received(a) is not None


def test_client_follows_its_worker_and_sends_what_is_outstanding_at_once(ctx: Any) -> None:
    a, b = router(ctx, "a"), router(ctx, "b")
    client = Client(ctx, ["inproc://a", "inproc://b"])
    client.call("svc", Ping(), lambda r, e: None, timeout_s=30, retries=2)
    assert received(a) is not None
    client.follow("inproc://b")
    assert client.endpoint == "inproc://b"
    assert received(b, 500) is not None  # not waiting for the 30 s timeout
    client.follow("inproc://elsewhere")  # not one of its brokers: ignored
    assert client.endpoint == "inproc://b"
    client.close()


def test_worker_reconnects_to_the_other_broker_and_says_where(ctx: Any) -> None:
    a, b = router(ctx, "a"), router(ctx, "b")
    worker = Worker(ctx, ["inproc://a", "inproc://b"], "svc", 0.05, 3)
    moved: list[str] = []
    worker.on_move = moved.append
    ready = received(a)
    assert ready is not None and ready[1:3] == [mdp.WORKER, mdp.W_READY]
    worker.tick(time.monotonic() + 1.0)  # a silent past liveness
    assert worker.endpoint == "inproc://b" and moved == ["inproc://b"]
    ready = received(b)
    assert ready is not None and ready[1:3] == [mdp.WORKER, mdp.W_READY]
    worker.reconnect("again")
    assert worker.endpoint == "inproc://a" and moved == ["inproc://b", "inproc://a"]
    worker.close()


def test_worker_with_one_endpoint_reconnects_to_it(ctx: Any) -> None:
    a = router(ctx, "a")
    worker = Worker(ctx, "inproc://a", "svc", 0.05, 3)
    worker.on_move = lambda _e: pytest.fail("one broker: nowhere to move")
    assert received(a) is not None
    worker.tick(time.monotonic() + 1.0)
    assert worker.endpoint == "inproc://a" and received(a) is not None
    worker.close()


def _disconnect(broker: zmq.Socket[bytes], worker: Worker, *reason: bytes) -> None:
    """The broker answers the worker's READY with DISCONNECT (and ``reason``)."""
    ready = received(broker)
    assert ready is not None and ready[1:3] == [mdp.WORKER, mdp.W_READY]
    broker.send_multipart([ready[0], mdp.WORKER, mdp.W_DISCONNECT, *reason])
    deadline = time.monotonic() + 2.0
    before = worker.connections
    while worker.connections == before and time.monotonic() < deadline:
        worker.socket.poll(10)
        worker.drain()


def _ready_in(worker: Worker) -> float:
    """How long until the worker's READY goes (its next deadline while one waits)."""
    return worker.next_deadline() - time.monotonic()


def test_a_refused_ready_backs_off_doubling(ctx: Any) -> None:
    a = router(ctx, "a")
    worker = Worker(ctx, "inproc://a", "svc", 0.05, 3)
    waits = []
    for _ in range(4):
        _disconnect(a, worker)  # at once after READY: a refusal
        waits.append(_ready_in(worker))
        worker.tick(time.monotonic() + 60)  # its READY goes now
    assert worker.refusals == 4
    assert waits[3] > 3 * waits[0], waits
    worker.close()


def test_a_passive_broker_is_asked_again_every_heartbeat_never_backing_off(ctx: Any) -> None:
    a = router(ctx, "a")
    worker = Worker(ctx, "inproc://a", "svc", 0.05, 3)
    for _ in range(8):
        _disconnect(a, worker, mdp.PASSIVE)
        assert 0 < _ready_in(worker) <= worker.heartbeat_interval_s
        worker.tick(time.monotonic() + 60)
    assert worker.refusals == 0
    worker.close()


def test_a_passive_broker_sends_the_worker_to_the_other_at_once(ctx: Any) -> None:
    a, b = router(ctx, "a"), router(ctx, "b")
    worker = Worker(ctx, ["inproc://a", "inproc://b"], "svc", 0.05, 3)
    _disconnect(a, worker, mdp.PASSIVE)
    assert worker.endpoint == "inproc://b"
    # Both passive: the worker asks again a heartbeat later, not at once.
    _disconnect(b, worker, mdp.PASSIVE)
    assert worker.endpoint == "inproc://a"
    assert 0 < _ready_in(worker) <= worker.heartbeat_interval_s
    assert received(a, 0) is None
    worker.tick(time.monotonic() + 60)
    ready = received(a)
    assert ready is not None and ready[1:3] == [mdp.WORKER, mdp.W_READY]
    # Registered (the broker's heartbeat): the next passive DISCONNECT moves it at once.
    a.send_multipart([ready[0], mdp.WORKER, mdp.W_HEARTBEAT])
    assert worker.socket.poll(2000)
    worker.drain()
    a.send_multipart([ready[0], mdp.WORKER, mdp.W_DISCONNECT, mdp.PASSIVE])
    while worker.endpoint == "inproc://a":
        assert worker.socket.poll(2000)
        worker.drain()
    ready = received(b)
    assert ready is not None and ready[1:3] == [mdp.WORKER, mdp.W_READY]
    worker.close()


def test_sync_client_retries_on_the_other_broker(ctx: Any) -> None:
    a, b = router(ctx, "a"), router(ctx, "b")

    def serve_b() -> None:
        frames = received(b, 5000)
        if frames is not None:
            answer(b, frames)

    thread = threading.Thread(target=serve_b)
    thread.start()
    client = SyncClient(["inproc://a", "inproc://b"], ctx)
    reply = client.call("svc", Ping(), timeout_s=0.2, retries=1)
    thread.join()
    assert isinstance(reply.body, Pong) and client.endpoint == "inproc://b"
    assert received(a, 0) is not None  # it went to a first
    client.close()


@pytest.mark.parametrize(("frames", "expected"), [
    ([b"lea-bstar/1 primary active"], (Role.PRIMARY, State.ACTIVE)),
    ([b"lea-bstar/1 backup passive"], (Role.BACKUP, State.PASSIVE)),
    ([b"lea-bstar/1 backup backup"], (Role.BACKUP, State.BACKUP)),
])
def test_a_state_message_says_role_and_state(frames: list[bytes],
                                             expected: tuple[Role, State]) -> None:
    assert parse_state(frames) == expected


@pytest.mark.parametrize("frames", [
    [], [b""], [b"lea-bstar/1 primary"], [b"lea-bstar/2 primary active"],
    [b"lea-bstar/1 boss active"], [b"lea-bstar/1 primary sleeping"],
    [b"lea-bstar/1 backup primary"],  # a backup cannot be in the primary's start state
    [b"lea-bstar/1 primary active", b"more"], [b"\xff\xfe \xff \x00"],
])
def test_anything_else_is_refused(frames: list[bytes]) -> None:
    with pytest.raises(ValueError):
        parse_state(frames)

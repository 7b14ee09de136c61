"""MDP/0.2 (RFC 18) and MMI (RFC 8) conformance of a real ``python -m broker`` process.

Peers are plain pyzmq DEALER sockets written from the RFC text, not the project's client and
worker classes, so a misreading shared by both sides cannot hide here.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from messages.events import BAD_MESSAGE, PEER_CONNECTED, PEER_DISCONNECTED, Event
from tests.conftest import Spawn, python_argv, wait_until
from transport.bus import Subscriber, event_frames

C_HDR, W_HDR = b"MDPC02", b"MDPW02"
C_REQUEST, C_PARTIAL, C_FINAL = b"\x01", b"\x02", b"\x03"
W_READY, W_REQUEST, W_PARTIAL, W_FINAL, W_HEARTBEAT, W_DISCONNECT = (
    b"\x01", b"\x02", b"\x03", b"\x04", b"\x05", b"\x06")


class Peer:
    """A DEALER speaking raw frames to the broker."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, live: bool = False) -> None:
        self.sock: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.live = live  # answer the broker's HEARTBEATs while the test waits on us

    def _next(self, timeout_ms: int) -> list[bytes] | None:
        """The next message, or None after ``timeout_ms``; a HEARTBEAT is answered if live."""
        if not self.sock.poll(timeout_ms):
            return None
        frames = self.sock.recv_multipart()
        if frames[:2] == [W_HDR, W_HEARTBEAT] and self.live:
            self.sock.send_multipart([W_HDR, W_HEARTBEAT])
        return frames

    def send(self, *frames: bytes) -> None:
        self.sock.send_multipart(list(frames))

    def recv(self, timeout: float = 5.0, heartbeats: bool = False) -> list[bytes]:
        """The next message (HEARTBEATs skipped unless asked for); fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            frames = self._next(int(left * 1000) + 1)
            if frames is not None and (heartbeats or frames[:2] != [W_HDR, W_HEARTBEAT]):
                return frames
        pytest.fail(f"nothing received within {timeout}s")

    def silent(self, seconds: float) -> bool:
        """True if nothing but HEARTBEATs arrives for ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            frames = self._next(int(left * 1000) + 1)
            if frames is not None and frames[:2] != [W_HDR, W_HEARTBEAT]:
                return False
        return True

    def close(self) -> None:
        self.sock.close(0)


class EchoWorker(threading.Thread):
    """A well-behaved worker in a thread: heartbeats, replies ``echo:<body>`` as FINAL."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, service: bytes) -> None:
        super().__init__(daemon=True)
        self.ctx, self.endpoint, self.service = ctx, endpoint, service
        self.served: list[bytes] = []
        # The broker heartbeats registered workers only: the first command proves READY took.
        self.registered = threading.Event()
        self._halt = threading.Event()

    def run(self) -> None:
        sock = self._connect()
        next_beat = time.monotonic() + 0.1
        while not self._halt.is_set():
            if sock.poll(20):
                frames = sock.recv_multipart()
                self.registered.set()
                if frames[1] == W_REQUEST:
                    self.served.append(frames[4])
                    sock.send_multipart([W_HDR, W_FINAL, frames[2], b"", b"echo:" + frames[4]])
                elif frames[1] == W_DISCONNECT:  # RFC 18: new socket, READY again
                    sock.close(0)
                    sock = self._connect()
            if time.monotonic() >= next_beat:
                sock.send_multipart([W_HDR, W_HEARTBEAT])
                next_beat = time.monotonic() + 0.1
        sock.send_multipart([W_HDR, W_DISCONNECT])
        sock.close(100)

    def _connect(self) -> zmq.Socket[bytes]:
        sock: zmq.Socket[bytes] = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        sock.send_multipart([W_HDR, W_READY, self.service])
        return sock

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


class BrokerRig:
    """A running broker and the sockets a test opened against it."""

    def __init__(self, proc: subprocess.Popen[bytes], env: dict[str, str]) -> None:
        self.proc, self.env = proc, env
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.mdp = env["LEA_MDP_ENDPOINT"]
        self.workers: list[EchoWorker] = []
        self.peers: list[Peer] = []
        self._probe: zmq.Socket[bytes] | None = None

    def peer(self, live: bool = False) -> Peer:
        p = Peer(self.ctx, self.mdp, live)
        self.peers.append(p)
        return p

    def worker(self, service: bytes, live: bool = True) -> Peer:
        """A raw worker that has sent READY; ``live`` ones answer heartbeats while waited on."""
        w = self.peer(live)
        w.send(W_HDR, W_READY, service)
        return w

    def echo_worker(self, service: bytes) -> EchoWorker:
        w = EchoWorker(self.ctx, self.mdp, service)
        w.start()
        self.workers.append(w)
        return w

    def mmi(self, service: bytes) -> bytes:
        client = self.peer()
        client.send(C_HDR, C_REQUEST, b"mmi.service", service)
        reply = client.recv()
        assert reply[:3] == [C_HDR, C_FINAL, b"mmi.service"]
        client.close()
        return reply[3]

    def wait_mmi(self, service: bytes, code: bytes, timeout: float = 5.0) -> None:
        wait_until(lambda: self.mmi(service) == code, timeout=timeout, interval=0.05)

    def subscriber(self, prefix: str = "lea:") -> Subscriber:
        """A SUB on bus out whose subscription is known to have reached the broker."""
        sub = Subscriber(self.ctx, self.env["LEA_BUS_OUT_ENDPOINT"], prefix)
        if self._probe is None:  # one for the whole test: its connection events come first
            self._probe = self.ctx.socket(zmq.PUB)
            self._probe.setsockopt(zmq.LINGER, 0)
            self._probe.connect(self.env["LEA_BUS_IN_ENDPOINT"])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self._probe.send_multipart(event_frames(prefix + "probe", "test"))
            event = sub.recv(0.05)
            if event is not None and event.topic == prefix + "probe":
                while sub.recv(0.05) is not None:
                    pass  # drop the other probes
                return sub
        pytest.fail("bus subscription never took effect")

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        for p in self.peers:
            p.close()
        if self._probe is not None:
            self._probe.close(0)
        self.ctx.destroy(0)


def start_broker(spawn: Spawn, env: dict[str, str]) -> BrokerRig:
    proc = spawn(python_argv("-m", "broker"), env=env, name="broker")
    rig = BrokerRig(proc, env)
    client = rig.peer()
    client.send(C_HDR, C_REQUEST, b"mmi.service", b"none")  # queued by zmq until it binds
    assert client.recv(timeout=15)[3] == b"404"
    return rig


@pytest.fixture
def broker(spawn: Spawn, lea_env: dict[str, str]) -> Iterator[BrokerRig]:
    rig = start_broker(spawn, lea_env)
    yield rig
    rig.close()
    assert rig.proc.poll() is None, "the broker died during the test"


def next_event(sub: Subscriber, topic: str, timeout: float = 5.0,
               where: Callable[[Event], bool] = lambda _e: True) -> Event:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        event = sub.recv(left)
        if event is not None and event.topic == topic and where(event):
            return event
    pytest.fail(f"no {topic} event within {timeout}s")


# -- the commands -------------------------------------------------------------------------


def test_request_reaches_worker_with_the_rfc_frames(broker: BrokerRig) -> None:
    worker = broker.worker(b"echo")
    broker.wait_mmi(b"echo", b"200")
    client = broker.peer()
    client.send(C_HDR, C_REQUEST, b"echo", b"part1", b"part2")
    frames = worker.recv()
    assert frames[:2] == [W_HDR, W_REQUEST]
    assert len(frames) == 6 and frames[2] and frames[3] == b""
    assert frames[4:] == [b"part1", b"part2"]


def test_partial_and_final_are_relayed_with_the_service_name(broker: BrokerRig) -> None:
    worker = broker.worker(b"echo")
    broker.wait_mmi(b"echo", b"200")
    client = broker.peer()
    client.send(C_HDR, C_REQUEST, b"echo", b"q")
    address = worker.recv()[2]
    worker.send(W_HDR, W_PARTIAL, address, b"", b"p1")
    worker.send(W_HDR, W_PARTIAL, address, b"", b"p2", b"p2b")
    worker.send(W_HDR, W_FINAL, address, b"", b"done")
    assert client.recv() == [C_HDR, C_PARTIAL, b"echo", b"p1"]
    assert client.recv() == [C_HDR, C_PARTIAL, b"echo", b"p2", b"p2b"]
    assert client.recv() == [C_HDR, C_FINAL, b"echo", b"done"]


def test_worker_gets_its_next_request_only_after_final(broker: BrokerRig) -> None:
    worker = broker.worker(b"echo")
    broker.wait_mmi(b"echo", b"200")
    client = broker.peer()
    client.send(C_HDR, C_REQUEST, b"echo", b"first")
    client.send(C_HDR, C_REQUEST, b"echo", b"second")
    first = worker.recv()
    assert first[4] == b"first"
    worker.send(W_HDR, W_PARTIAL, first[2], b"", b"half")
    assert worker.silent(0.3), "a second request arrived before FINAL"
    worker.send(W_HDR, W_FINAL, first[2], b"", b"all")
    assert worker.recv()[4] == b"second"


def test_broker_heartbeats_every_worker(broker: BrokerRig) -> None:
    worker = broker.worker(b"echo", live=False)
    assert worker.recv(heartbeats=True) == [W_HDR, W_HEARTBEAT]
    started = time.monotonic()
    for _ in range(4):
        worker.send(W_HDR, W_HEARTBEAT)
        assert worker.recv(timeout=2, heartbeats=True) == [W_HDR, W_HEARTBEAT]
    # Four more intervals of 250 ms: paced by the interval, not a burst (generous bounds).
    assert 0.5 < time.monotonic() - started < 5
    assert broker.mmi(b"echo") == b"200"  # our heartbeats kept it registered


def test_disconnect_from_worker_forgets_it(broker: BrokerRig) -> None:
    worker = broker.worker(b"echo")
    broker.wait_mmi(b"echo", b"200")
    worker.send(W_HDR, W_DISCONNECT)
    broker.wait_mmi(b"echo", b"404")


@pytest.mark.parametrize("frames", [
    [W_HDR, W_HEARTBEAT],
    [W_HDR, W_FINAL, b"\x00\x12\x34\x56\x78", b"", b"body"],
    [W_HDR, W_PARTIAL, b"\x00\x12\x34\x56\x78", b"", b"body"],
], ids=["heartbeat", "final", "partial"])
def test_commands_before_ready_get_disconnect(broker: BrokerRig, frames: list[bytes]) -> None:
    stranger = broker.peer()
    stranger.send(*frames)
    assert stranger.recv(heartbeats=True) == [W_HDR, W_DISCONNECT]


def test_second_ready_gets_disconnect_and_unregisters(broker: BrokerRig) -> None:
    worker = broker.worker(b"echo")
    broker.wait_mmi(b"echo", b"200")
    worker.send(W_HDR, W_READY, b"echo")
    assert worker.recv() == [W_HDR, W_DISCONNECT]
    broker.wait_mmi(b"echo", b"404")


def test_invalid_command_from_a_worker_disconnects_it(broker: BrokerRig) -> None:
    worker = broker.worker(b"echo")
    broker.wait_mmi(b"echo", b"200")
    worker.send(W_HDR, W_FINAL, b"no-delimiter", b"body")
    assert worker.recv() == [W_HDR, W_DISCONNECT]
    broker.wait_mmi(b"echo", b"404")


def test_disconnect_before_ready_is_ignored(broker: BrokerRig) -> None:
    stranger = broker.peer()
    stranger.send(W_HDR, W_DISCONNECT)
    assert stranger.silent(0.5)


# -- liveness and recovery ----------------------------------------------------------------


def test_silent_worker_expires(broker: BrokerRig) -> None:
    broker.worker(b"quiet", live=False)  # never heartbeats: 250 ms x 3 and it is gone
    broker.wait_mmi(b"quiet", b"200")
    broker.wait_mmi(b"quiet", b"404", timeout=5)


@pytest.mark.parametrize("how", ["silent", "close", "disconnect"])
def test_request_of_a_lost_worker_goes_to_another(broker: BrokerRig, how: str) -> None:
    doomed = broker.worker(b"echo")  # answers heartbeats only while the test waits on it
    broker.wait_mmi(b"echo", b"200")
    client = broker.peer()
    client.send(C_HDR, C_REQUEST, b"echo", b"job")
    assert doomed.recv()[4] == b"job"
    if how == "close":
        doomed.close()
    elif how == "disconnect":
        doomed.send(W_HDR, W_DISCONNECT)
    rescuer = broker.echo_worker(b"echo")
    assert client.recv(timeout=10) == [C_HDR, C_FINAL, b"echo", b"echo:job"]
    assert rescuer.served == [b"job"]


def test_two_workers_share_the_load(broker: BrokerRig) -> None:
    a, b = broker.echo_worker(b"echo"), broker.echo_worker(b"echo")
    assert a.registered.wait(5) and b.registered.wait(5)
    client = broker.peer()
    for i in range(40):
        client.send(C_HDR, C_REQUEST, b"echo", b"%d" % i)
    replies = {client.recv()[3] for _ in range(40)}
    assert replies == {b"echo:%d" % i for i in range(40)}
    assert a.served and b.served, (len(a.served), len(b.served))


def test_request_waits_for_a_worker(broker: BrokerRig) -> None:
    client = broker.peer()
    client.send(C_HDR, C_REQUEST, b"late", b"early-bird")
    assert client.silent(0.5)
    broker.echo_worker(b"late")
    assert client.recv() == [C_HDR, C_FINAL, b"late", b"echo:early-bird"]


def test_queued_request_expires(spawn: Spawn, lea_env: dict[str, str]) -> None:
    rig = start_broker(spawn, {**lea_env, "LEA_REQUEST_EXPIRY_S": "0.5"})
    try:
        client = rig.peer()
        client.send(C_HDR, C_REQUEST, b"nobody", b"stale")
        time.sleep(1.5)  # expiry 0.5 s, checked every 250 ms heartbeat tick
        worker = rig.worker(b"nobody")
        assert worker.silent(0.5), "an expired request was delivered"
        client.send(C_HDR, C_REQUEST, b"nobody", b"fresh")
        assert worker.recv()[4] == b"fresh"
        assert rig.proc.poll() is None
    finally:
        rig.close()


def test_several_outstanding_requests_from_one_client(broker: BrokerRig) -> None:
    broker.echo_worker(b"echo")
    client = broker.peer()
    for i in range(25):
        client.send(C_HDR, C_REQUEST, b"echo", b"r%d" % i)
    got = [client.recv() for _ in range(25)]
    assert all(f[:3] == [C_HDR, C_FINAL, b"echo"] for f in got)
    assert {f[3] for f in got} == {b"echo:r%d" % i for i in range(25)}


def test_reply_for_another_client_is_dropped(broker: BrokerRig) -> None:
    sub = broker.subscriber()
    worker = broker.worker(b"echo")
    broker.wait_mmi(b"echo", b"200")
    client = broker.peer()
    client.send(C_HDR, C_REQUEST, b"echo", b"q")
    address = worker.recv()[2]
    worker.send(W_HDR, W_FINAL, address + b"x", b"", b"forged")
    event = next_event(sub, BAD_MESSAGE)
    assert "client" in event.data["reason"]
    assert event.data["peer"] and event.data["head"][0] == W_HDR.hex()
    assert client.silent(0.3)
    worker.send(W_HDR, W_FINAL, address, b"", b"real")  # the worker is still trusted
    assert client.recv() == [C_HDR, C_FINAL, b"echo", b"real"]


def test_reply_to_a_vanished_client_is_dropped(broker: BrokerRig) -> None:
    worker = broker.worker(b"echo")
    broker.wait_mmi(b"echo", b"200")
    gone = broker.peer()
    gone.send(C_HDR, C_REQUEST, b"echo", b"q1")
    address = worker.recv()[2]
    gone.close()
    time.sleep(0.2)
    worker.send(W_HDR, W_FINAL, address, b"", b"nobody listens")
    client = broker.peer()
    client.send(C_HDR, C_REQUEST, b"echo", b"q2")
    nxt = worker.recv()
    worker.send(W_HDR, W_FINAL, nxt[2], b"", b"a2")
    assert client.recv() == [C_HDR, C_FINAL, b"echo", b"a2"]


# -- MMI ----------------------------------------------------------------------------------


def test_mmi_service(broker: BrokerRig) -> None:
    assert broker.mmi(b"echo") == b"404"
    broker.echo_worker(b"echo")
    broker.wait_mmi(b"echo", b"200")


def test_unknown_mmi_service_is_501(broker: BrokerRig) -> None:
    client = broker.peer()
    client.send(C_HDR, C_REQUEST, b"mmi.nonsense", b"x")
    assert client.recv() == [C_HDR, C_FINAL, b"mmi.nonsense", b"501"]


# -- bus, events, process -----------------------------------------------------------------


def test_bus_proxy_forwards_published_events(broker: BrokerRig) -> None:
    sub = Subscriber(broker.ctx, broker.env["LEA_BUS_OUT_ENDPOINT"], "lea:test")
    pub = broker.ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(broker.env["LEA_BUS_IN_ENDPOINT"])
    other = broker.ctx.socket(zmq.PUB)
    other.setsockopt(zmq.LINGER, 0)
    other.connect(broker.env["LEA_BUS_IN_ENDPOINT"])
    try:
        def delivered() -> Event | None:
            other.send_multipart(event_frames("lea:other", "test"))  # filtered out
            pub.send_multipart(event_frames("lea:test_event", "test", {"n": 1}))
            return sub.recv(0.05)
        event = wait_until(delivered, timeout=10)
        assert isinstance(event, Event)
        assert (event.topic, event.source, event.data) == ("lea:test_event", "test", {"n": 1})
    finally:
        pub.close(0)
        other.close(0)
        sub.close()


@pytest.mark.parametrize("which", ["mdp", "bus_in"])
def test_peer_connected_and_disconnected_events(broker: BrokerRig, which: str) -> None:
    sub = broker.subscriber("lea:peer_")
    endpoint = broker.mdp if which == "mdp" else broker.env["LEA_BUS_IN_ENDPOINT"]
    sock = broker.ctx.socket(zmq.DEALER if which == "mdp" else zmq.PUB)
    sock.connect(endpoint)
    connected = next_event(sub, PEER_CONNECTED, where=lambda e: e.data["socket"] == which)
    assert connected.source == "broker"
    data = connected.data
    assert data["endpoint"] == endpoint and isinstance(data["fd"], int)
    assert re.fullmatch(r"127\.0\.0\.1:\d+", data["peer"]), data
    sock.close(0)
    gone = next_event(sub, PEER_DISCONNECTED, where=lambda e: e.data["fd"] == data["fd"])
    assert gone.data == data


def test_sigterm_is_a_clean_exit_and_workers_are_told(spawn: Spawn,
                                                      lea_env: dict[str, str]) -> None:
    rig = start_broker(spawn, lea_env)
    try:
        worker = rig.worker(b"echo")
        rig.wait_mmi(b"echo", b"200")
        rig.proc.send_signal(signal.SIGTERM)
        assert rig.proc.wait(10) == 0
        assert worker.recv() == [W_HDR, W_DISCONNECT]  # so it re-registers with the next broker
    finally:
        rig.close()

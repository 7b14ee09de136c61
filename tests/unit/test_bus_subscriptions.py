"""A publisher skips events nobody subscribed to, and still delivers once someone does."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from broker.bus_proxy import BusProxy
from tests.conftest import free_port, wait_until
from transport import bus
from transport.bus import MAX_PREFIXES, Publisher, Subscriber, Subscriptions, parse_event


def test_subscriptions_mirror_the_xpub_messages() -> None:
    subs = Subscriptions()
    assert not subs.wants(b"lea:x")
    subs.update([b"\x01lea:loop"])
    assert subs.wants(b"lea:loop_detected") and not subs.wants(b"lea:peer")
    subs.update([b"\x01"])  # the empty prefix: everything
    assert subs.wants(b"lea:peer")
    subs.update([b"\x00"])
    subs.update([b"\x00lea:loop"])
    assert not subs.wants(b"lea:loop_detected")


@pytest.mark.parametrize("frames", [[b""], [b"\x02lea:"], [b"\x01lea:", b"x"], [b"lea:"]])
def test_subscriptions_ignore_what_is_not_one(frames: list[bytes]) -> None:
    subs = Subscriptions()
    subs.update(frames)
    assert subs.prefixes == set() and not subs.wants(b"lea:x")


def test_sticky_subscriptions_ignore_unsubscribing() -> None:
    subs = Subscriptions(sticky=True)
    subs.update([b"\x01lea:"])
    subs.update([b"\x00lea:"])
    assert subs.wants(b"lea:x")


def test_a_flood_of_prefixes_wants_everything() -> None:
    subs = Subscriptions()
    for i in range(MAX_PREFIXES + 1):
        subs.update([b"\x01p%d" % i])
    assert subs.wants(b"anything")  # the socket's own filter decides
    subs.update([b"\x00p0"])
    assert not subs.wants(b"anything")


@pytest.fixture
def upstream() -> Iterator[tuple[zmq.Socket[Any], Publisher, list[str]]]:
    """A bound XSUB (the broker's bus in) and a Publisher connected to it; the list gets
    the topic of every event the publisher built."""
    ctx: zmq.Context[Any] = zmq.Context()
    xsub = ctx.socket(zmq.XSUB)
    xsub.setsockopt(zmq.LINGER, 0)
    xsub.bind("inproc://bus-in")
    pub = Publisher(ctx, "inproc://bus-in", source="test")
    built: list[str] = []
    real = bus.event_frames

    def spy(topic: str, source: str, data: dict[str, Any] | None = None) -> list[bytes]:
        built.append(topic)
        return real(topic, source, data)

    bus.event_frames = spy
    try:
        yield xsub, pub, built
    finally:
        bus.event_frames = real
        pub.socket.close(0)
        xsub.close(0)
        ctx.term()


def _received(xsub: zmq.Socket[Any]) -> list[str]:
    topics = []
    while xsub.poll(0):
        topics.append(parse_event(xsub.recv_multipart()).topic)
    return topics


def test_publisher_builds_only_what_is_subscribed(
        upstream: tuple[zmq.Socket[Any], Publisher, list[str]]) -> None:
    xsub, pub, built = upstream
    pub.publish("lea:early")
    assert built == []  # nobody subscribed: not even built
    xsub.send(b"\x01lea:late")
    seen: list[str] = []

    def delivered() -> bool:
        pub.publish("lea:other")
        pub.publish("lea:late", n=1)
        seen.extend(_received(xsub))
        return "lea:late" in seen

    wait_until(delivered)  # a subscriber that came later gets the events
    assert "lea:other" not in built and "lea:other" not in seen
    xsub.send(b"\x00lea:late")

    def unsubscribed() -> bool:
        pub.publish("lea:x")  # publishing is what reads the subscriptions
        return not pub.subscriptions.wants(b"lea:late")

    wait_until(unsubscribed)
    built.clear()
    pub.publish("lea:late")
    assert built == []


def _raw_xsub_peer(port: int) -> socket.socket:
    """A ZMTP 3.0 XSUB speaking by hand: libzmq's own would not send what a bad peer can."""
    peer = socket.create_connection(("127.0.0.1", port))
    peer.sendall(b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\0") + bytes(32))
    ready = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 4) + b"XSUB"
    peer.sendall(bytes([0x04, len(ready)]) + ready)
    return peer


def test_broker_events_survive_a_forged_unsubscribe() -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    proxy = BusProxy(ctx, 1 << 20)
    port = free_port()
    proxy.xpub.bind(f"tcp://127.0.0.1:{port}")
    proxy.xsub.bind("inproc://bus-in")
    pub = Publisher(ctx, "inproc://bus-in", source="test")
    sub = Subscriber(ctx, f"tcp://127.0.0.1:{port}", "lea:")
    peers = [_raw_xsub_peer(port)]
    upstream: list[list[bytes]] = []

    def publisher_got(message: bytes) -> bool:
        proxy.forward_subscriptions()
        while pub.socket.poll(0):
            upstream.append(pub.socket.recv_multipart())
        return [message] in upstream

    try:
        wait_until(lambda: publisher_got(b"\x01lea:"))
        # Unsubscribing what it never subscribed: libzmq's XPUB hands that up all the same
        # (and, as before, the publishers stop publishing lea:).
        def forged() -> bool:  # sent again while the peer's pipe may still be attaching
            try:
                for message in (b"\x02not a subscription", b"\x00lea:"):
                    peers[-1].sendall(bytes([0x00, len(message)]) + message)
            except OSError:  # libzmq dropped this peer (a bad frame may do that): a new one
                peers.append(_raw_xsub_peer(port))
                return False
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                if publisher_got(b"\x00lea:"):
                    return True
                time.sleep(0.02)
            return False

        wait_until(forged)
        assert [b"\x02not a subscription"] not in upstream  # upstream messages stop here
        proxy.publish("lea:peer_connected", {"n": 1})
        event = sub.recv(5.0)
        assert event is not None and event.topic == "lea:peer_connected"
    finally:
        for peer in peers:
            peer.close()
        sub.close()
        pub.socket.close(0)
        proxy.close()
        ctx.term()

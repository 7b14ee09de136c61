"""The broker's heartbeat tick: a worker just given a REQUEST is not also sent a HEARTBEAT."""

from __future__ import annotations

from typing import Any

import zmq

from broker.majordomo import Majordomo
from runtime.settings import Settings
from tests.conftest import wait_until
from transport import mdp
from transport.frames import recv_frames


def test_a_request_stands_for_the_next_heartbeat_only() -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("inproc://mdp")
    worker = ctx.socket(zmq.DEALER)
    worker.setsockopt(zmq.LINGER, 0)
    worker.connect("inproc://mdp")
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.connect("inproc://mdp")
    reports: list[str] = []
    broker = Majordomo(router, Settings(heartbeat_interval_ms=1000),
                       lambda _f, why: reports.append(why))

    def deliver(sock: zmq.Socket[Any], *frames: bytes) -> None:
        sock.send_multipart(list(frames))
        got = wait_until(lambda: router.poll(0) and recv_frames(router))
        assert isinstance(got, list)
        broker.handle(got)

    def commands() -> list[bytes]:
        got = []
        while worker.poll(50):
            got.append(worker.recv_multipart()[1])
        return got

    try:
        broker.now = 10.0
        deliver(worker, *mdp.worker_ready(b"echo"))
        broker.tick(10.0)
        assert commands() == [mdp.W_HEARTBEAT]  # idle: heartbeated
        broker.now = 10.7
        deliver(client, *mdp.client_request(b"echo", b"hi"))
        assert commands() == [mdp.W_REQUEST]
        broker.tick(11.0)  # 0.3 s after the REQUEST: that was the heartbeat
        assert commands() == []
        broker.tick(12.0)  # 1.3 s after it, still busy: heartbeated again
        assert commands() == [mdp.W_HEARTBEAT]
        assert reports == []
    finally:
        for sock in (worker, client, router):
            sock.close(0)
        ctx.term()

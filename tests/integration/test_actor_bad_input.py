"""An actor never crashes on bad input: malformed bodies through the broker, and malformed
MDP frames from a peer posing as its broker; afterwards it still answers a ping."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import zmq

from messages import ErrorReply, Pong, decode, encode
from messages.control import Ping
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import serves
from transport import mdp
from transport.client import SyncClient


def malformed_bodies(rng: random.Random, count: int) -> Iterator[list[bytes]]:
    """Body frame lists that are not one valid request of a known type."""
    good = encode(Ping())
    makers = [
        lambda: [rng.randbytes(rng.randint(0, 64))],
        lambda: [good[: rng.randint(0, len(good) - 1)]],
        lambda: [msgpack.packb({"v": 1, "type": "ping", "id": "x"})],
        lambda: [msgpack.packb({"v": 2, "type": "ping", "id": "x", "body": {}})],
        lambda: [msgpack.packb({"v": 1, "type": "no.such.type", "id": "x", "body": {}})],
        lambda: [msgpack.packb({"v": 1, "type": "ping", "id": 42, "body": {}})],
        lambda: [msgpack.packb({"v": 1, "type": "ping", "id": "x", "body": [1, 2]})],
        lambda: [msgpack.packb({"v": 1, "type": "ping", "id": "x", "body": {"junk": 1}})],
        lambda: [msgpack.packb({"v": 1, "type": "replay.start", "id": "x",
                                "body": {"machine_id": 3}})],
        lambda: [msgpack.packb([1, 2, 3])],
        lambda: [good, good],
        lambda: [b""],
        lambda: [msgpack.packb({"v": True, "type": "ping", "id": "x", "body": {}})],
    ]
    for _ in range(count):
        yield rng.choice(makers)()


@pytest.fixture
def tree_part(spawn: Spawn, lea_env: dict[str, str]) -> dict[str, str]:
    spawn(python_argv("-m", "broker"), env=lea_env, name="broker")
    spawn(python_argv("-m", "actors", "watchdog"), env=lea_env, name="watchdog")
    client = SyncClient(lea_env["LEA_MDP_ENDPOINT"])
    wait_until(lambda: serves(client, "watchdog"))
    client.close()
    return lea_env


def test_actor_answers_every_malformed_body_with_an_error(tree_part: dict[str, str]) -> None:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(tree_part["LEA_MDP_ENDPOINT"])
    rng = random.Random(1234)
    sent = 0
    for body in malformed_bodies(rng, 1000):
        sock.send_multipart(mdp.client_request(b"watchdog", *body))
        sent += 1
    errors = 0
    while errors < sent:
        assert sock.poll(10_000), f"only {errors} of {sent} malformed requests were answered"
        frames = sock.recv_multipart()
        assert frames[:3] == [mdp.CLIENT, mdp.C_FINAL, b"watchdog"]
        reply = decode(frames[3]).body
        assert isinstance(reply, ErrorReply), reply
        assert reply.code in {"bad_message", "unsupported_type"}
        errors += 1
    sock.close()
    client = SyncClient(tree_part["LEA_MDP_ENDPOINT"])
    assert isinstance(client.call("watchdog", Ping()).body, Pong)
    client.close()


def test_actor_survives_malformed_frames_from_its_broker(
    spawn: Spawn, lea_env: dict[str, str]
) -> None:
    """A ROUTER in the test poses as the broker and sends garbage MDP/Worker frames."""
    # An actor serves from the tree's own door (broker/tree_door.py): the ROUTER binds it.
    endpoint = f"ipc://{lea_env['LEA_DATA_DIR']}/fake-broker.sock"
    Path(lea_env["LEA_DATA_DIR"]).mkdir(parents=True, exist_ok=True)
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(endpoint)
    env = dict(lea_env, LEA_TREE_ENDPOINT=endpoint, LEA_HEARTBEAT_INTERVAL_MS="1000",
               LEA_HEARTBEAT_LIVENESS="10")
    actor = spawn(python_argv("-m", "actors", "audit_log"), env=env, name="audit_log")
    assert router.poll(10_000)
    identity, *ready = router.recv_multipart()
    assert ready == mdp.worker_ready(b"audit_log")
    rng = random.Random(99)
    for i in range(1000):
        kind = i % 6
        if kind == 0:
            frames = [rng.randbytes(rng.randint(0, 32)) for _ in range(rng.randint(1, 6))]
        elif kind == 1:
            frames = [mdp.WORKER, bytes([rng.randint(7, 255)])]
        elif kind == 2:
            frames = [mdp.WORKER, mdp.W_REQUEST]  # truncated
        elif kind == 3:
            frames = [mdp.WORKER, mdp.W_REQUEST, b"client", b"", rng.randbytes(50)]
        elif kind == 4:
            frames = [mdp.CLIENT, mdp.C_FINAL, b"x", b"y"]
        else:
            frames = [mdp.WORKER, mdp.W_REQUEST, b"client", b"not-empty", b"body"]
        router.send_multipart([identity, *frames])
    router.send_multipart([identity, *mdp.worker_request(b"me", [encode(Ping(), "final")])])
    while True:
        assert router.poll(10_000), "no answer to the well-formed request"
        _id, *frames = router.recv_multipart()
        if frames[:2] == [mdp.WORKER, mdp.W_FINAL] and frames[2] == b"me":
            envelope = decode(frames[4])
            if envelope.id == "final":
                assert isinstance(envelope.body, Pong)
                break
    assert actor.poll() is None
    router.close()

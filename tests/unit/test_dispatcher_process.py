"""The dispatcher's shell, in-process (no broker): how requests reach the core and the store."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from actors.dispatcher.machine.state import DispatcherConfig
from actors.dispatcher.process import DispatcherActor
from messages.base import Message
from messages.codec import decode, encode
from messages.control import ErrorReply
from messages.replay import (
    CancelReplay,
    GetReplayStatus,
    ReplayCancelled,
    ReplayStarted,
    ReplayStatusReply,
    StartReplay,
)
from runtime.settings import Settings
from tests.conftest import free_port
from tests.unit.test_dispatcher_core import wf
from transport.peer_id import TREE_USER_ID, client_address
from transport.worker import Request


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # Nothing listens there: the actor's sockets connect and queue, nothing is delivered.
    port = free_port()
    return Settings(mdp_endpoint=f"tcp://127.0.0.1:{port}",
                    bus_in_endpoint=f"tcp://127.0.0.1:{port}", data_dir=tmp_path / "var")


@contextmanager
def dispatcher(settings: Settings, config: DispatcherConfig | None = None
               ) -> Iterator[DispatcherActor]:
    """The actor without its loop: requests are handed to ``serve`` directly."""
    a = DispatcherActor(settings, config)
    try:
        yield a
    finally:
        a.on_stop()
        a.close()


def serve(a: DispatcherActor, message: Message, msg_id: str) -> Message:
    reply = decode(a.serve(Request(client=client_address(b"client", TREE_USER_ID),
                                 body=[encode(message, msg_id)])))
    assert reply.id == msg_id
    return reply.body


def replays(a: DispatcherActor) -> list[str]:
    reply = serve(a, GetReplayStatus(), "status")
    assert isinstance(reply, ReplayStatusReply)
    return [r.replay_id for r in reply.replays]


def test_a_copy_of_a_start_request_does_not_start_the_workflow_twice(
        settings: Settings) -> None:
    # Found by the chaos test: SyncClient (Lazy Pirate) re-sends a StartReplay with the same
    # envelope id after a timeout while the broker still holds the first copy for a
    # restarting dispatcher; both reached it and the workflow ran twice on the workstation.
    start = StartReplay(workflow=wf("s1", "s2"), machine_id="m1")
    with dispatcher(settings) as actor:
        first = serve(actor, start, "req-1")
        assert isinstance(first, ReplayStarted)
        assert serve(actor, start, "req-1") == first
        assert replays(actor) == [first.replay_id]
        other = serve(actor, start, "req-2")  # another request of the same workflow
        assert isinstance(other, ReplayStarted) and other.replay_id != first.replay_id

    # Committed with the decision: a copy arriving after a restart gets the same answer.
    with dispatcher(settings) as actor:
        assert serve(actor, start, "req-1") == first
        assert replays(actor) == [first.replay_id, other.replay_id]
        cancel = CancelReplay(replay_id=first.replay_id)
        cancelled = serve(actor, cancel, "req-3")
        assert isinstance(cancelled, ReplayCancelled)
        assert serve(actor, cancel, "req-3") == cancelled  # not "not_running"
        refused = serve(actor, cancel, "req-4")  # a new request is judged afresh
        assert isinstance(refused, ErrorReply) and refused.code == "not_running"

"""Actor.defer (actors/base.py): a handler's blocking work runs off the loop; the loop keeps
heartbeating, and a job or callback that fails is answered with an error, not a crash."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from messages import Pong, events
from messages.control import Ping
from tests.conftest import ROOT, Spawn, python_argv, wait_until
from tests.fixtures.defer_actor import SlowJob
from tests.integration.probes import serves
from transport.bus import Subscriber
from transport.client import CallFailed, SyncClient

SERVICE = "defer_probe"


@pytest.fixture
def probe(spawn: Spawn, lea_env: dict[str, str]) -> Iterator[tuple[SyncClient, Subscriber]]:
    spawn(python_argv("-m", "broker"), env=lea_env, name="broker")
    actor = spawn(python_argv(str(ROOT / "tests" / "fixtures" / "defer_actor.py")),
                  env=lea_env, name=SERVICE)
    ctx: zmq.Context[Any] = zmq.Context()
    client = SyncClient(lea_env["LEA_MDP_ENDPOINT"], ctx)
    sub = Subscriber(ctx, lea_env["LEA_BUS_OUT_ENDPOINT"], events.BAD_MESSAGE)
    wait_until(lambda: serves(client, SERVICE), timeout=20)
    yield client, sub
    assert actor.poll() is None, "the actor died"
    client.close()
    sub.close()
    ctx.term()


def test_a_deferred_job_is_answered_and_the_worker_stays_registered(
        probe: tuple[SyncClient, Subscriber]) -> None:
    client, _sub = probe
    # 2 s of work, heartbeat expiry 0.75 s: a blocked loop would be dropped by the broker
    # and the request handed out again; its one answer comes back instead.
    reply = client.call(SERVICE, SlowJob(delay_s=2.0), timeout_s=10.0, retries=0).body
    assert isinstance(reply, Pong) and reply.status == "done"
    assert client.raw("mmi.service", SERVICE.encode()) == [b"200"]


def test_a_failing_job_is_an_internal_error_and_an_event(
        probe: tuple[SyncClient, Subscriber]) -> None:
    client, sub = probe
    event = None
    for _ in range(10):  # a subscription takes a moment to reach the publisher (slow joiner)
        with pytest.raises(CallFailed) as info:
            client.call(SERVICE, SlowJob(fail=True), timeout_s=5.0, retries=0)
        assert info.value.code == "internal_error" and "the job failed" in info.value.message
        if (event := sub.recv(timeout_s=1.0)) is not None:
            break
    assert event is not None and event.data["reason"] == "internal_error"
    assert isinstance(client.call(SERVICE, Ping()).body, Pong)


def test_a_failing_callback_still_sends_the_answer(probe: tuple[SyncClient, Subscriber]
                                                   ) -> None:
    client, _sub = probe
    reply = client.call(SERVICE, SlowJob(fail_after=True), timeout_s=5.0, retries=0).body
    assert isinstance(reply, Pong) and reply.status == "done"

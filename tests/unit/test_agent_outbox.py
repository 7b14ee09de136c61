"""The agent's report path: the ledger records a report, the outbox sends those very bytes,
every try the same, until the dispatcher's ack, which the ledger records (agent/protocol/outbox.py,
agent/protocol/asks.py). A ROUTER socket stands for the broker and the dispatcher behind it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from agent.protocol.asks import Asks
from agent.protocol.ledger import Ledger, outbox_report
from agent.protocol.outbox import Outbox
from messages.codec import decode, encode
from messages.dispatch import ActionReport, DispatchAction, DispatchMeta, ReportAck
from messages.workflow import Action
from transport import mdp
from transport.client import Client


class Dispatcher:
    """Takes the agent's requests as the broker hands them to ``dispatcher``."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str) -> None:
        self.router = ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.bind(endpoint)

    def request(self) -> tuple[bytes, bytes]:
        """(routing id, payload) of the next request."""
        assert self.router.poll(10_000), "nothing sent"
        who, *frames = self.router.recv_multipart()
        assert frames[:3] == [mdp.CLIENT, mdp.C_REQUEST, b"dispatcher"], frames[:3]
        return who, frames[3]

    def answer(self, who: bytes, payload: bytes) -> None:
        self.router.send_multipart([who, mdp.CLIENT, mdp.C_FINAL, b"dispatcher", payload])


@pytest.fixture
def wired(tmp_path: Path) -> Iterator[tuple[Dispatcher, Client, Outbox, Asks, Ledger]]:
    ctx: zmq.Context[Any] = zmq.Context()
    dispatcher = Dispatcher(ctx, "inproc://mdp")
    client = Client(ctx, "inproc://mdp")
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    outbox = Outbox(client)
    yield dispatcher, client, outbox, Asks(outbox, ledger, "m1"), ledger
    ledger.close()
    client.close()
    dispatcher.router.close(0)
    ctx.term()


def dispatch() -> DispatchAction:
    return DispatchAction(
        replay_id="r1", session_id="s1", machine_id="m1", attempt_id="att_1",
        action=Action.model_validate({"action_id": "step_1", "type": "click",
                                      "target_spec": {"x_pct": 0.5, "y_pct": 0.5}}),
        dispatch_meta=DispatchMeta(first_dispatched_at=1.0))


def test_a_report_goes_out_as_recorded_and_again_byte_for_byte_until_acked(
        wired: tuple[Dispatcher, Client, Outbox, Asks, Ledger]) -> None:
    dispatcher, client, outbox, asks, ledger = wired
    d = dispatch()
    ledger.begin(d)
    report = ActionReport(replay_id="r1", session_id="s1", machine_id="m1",
                          action_id="step_1", attempt_id="att_1", success=True)
    recorded = ledger.finish("r1", "step_1", report)  # on disk before anything is sent
    asks.report(recorded)
    _who, first = dispatcher.request()
    assert first == recorded.data

    # No answer: when the wait is over, the same bytes (same envelope id) go again.
    later = time.monotonic() + 60
    client.tick(later)
    outbox.tick(later)
    who, second = dispatcher.request()
    assert second == recorded.data and len(outbox) == 1

    # After a restart the ledger gives the same report back, to send as it is.
    (entry,) = ledger.unacked()
    assert outbox_report(entry) == recorded

    # An answer that is not this attempt's ack settles nothing.
    dispatcher.answer(who, encode(ReportAck(action_id="step_1", attempt_id="att_0",
                                            status="accepted"), recorded.msg_id))
    assert client.socket.poll(10_000)
    client.drain()
    assert len(outbox) == 1 and ledger.unacked()

    outbox.tick(time.monotonic() + 120)
    who, third = dispatcher.request()
    assert third == recorded.data
    assert decode(third).id == recorded.msg_id
    dispatcher.answer(who, encode(ReportAck(action_id="step_1", attempt_id="att_1",
                                            status="accepted"), recorded.msg_id))
    assert client.socket.poll(10_000)
    client.drain()
    assert len(outbox) == 0 and ledger.unacked() == []

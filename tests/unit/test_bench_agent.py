"""The bench agent speaks the agent's protocol: claims before input, with byte-exact messages."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import zmq

from messages.base import Message
from messages.codec import decode, encode, new_id
from messages.dispatch import (
    ActionReceived,
    ActionReport,
    AgentHello,
    ClaimAttempt,
    ClaimReply,
    DispatchAction,
    DispatchMeta,
    ReportAck,
)
from messages.replay import Ack
from messages.workflow import Action
from transport import mdp

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_agent import BenchAgent, Host
from bench_wire import check_wire


def test_fast_messages_are_the_codecs() -> None:
    check_wire()  # raises WireMismatch when a model changes under the bench


class FakeBroker:
    """A ROUTER standing for the broker and the dispatcher behind it."""

    def __init__(self, ctx: zmq.Context[Any]) -> None:
        self.router = ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.bind("inproc://mdp")  # before the agent connects (inproc)
        self.host: Host | None = None  # served while we wait for the agent
        self.worker = b""

    def next(self) -> tuple[bytes, list[bytes]]:
        """The next message an agent sent (serving the host meanwhile)."""
        deadline = time.monotonic() + 10
        while not self.router.poll(0):
            assert self.host is not None and time.monotonic() < deadline, "nothing sent"
            self.host.step(0.005)
        frames = self.router.recv_multipart()
        return frames[0], frames[1:]

    def request(self, expected: type[Message]) -> tuple[bytes, str, Any]:
        """The next client request, skipping heartbeats: (routing id, envelope id, body)."""
        while True:
            who, frames = self.next()
            if frames[0] == mdp.WORKER and frames[1] == mdp.W_READY:
                self.worker = who
            elif frames[0] == mdp.CLIENT:
                envelope = decode(frames[3])
                assert isinstance(envelope.body, expected), envelope.body
                return who, envelope.id, envelope.body

    def answer(self, who: bytes, msg_id: str, reply: Message) -> None:
        self.router.send_multipart([who, mdp.CLIENT, mdp.C_FINAL, b"dispatcher",
                                    encode(reply, msg_id)])

    def dispatch(self, machine: str, action_id: str) -> DispatchAction:
        d = DispatchAction(
            replay_id="r" * 32, session_id="s" * 32, machine_id=machine, attempt_id=new_id(),
            action=Action.model_validate({"action_id": action_id, "type": "click",
                                          "target_spec": {"x_pct": 0.5, "y_pct": 0.5}}),
            dispatch_meta=DispatchMeta(first_dispatched_at=1.0))
        self.router.send_multipart([self.worker, mdp.WORKER, mdp.W_REQUEST, b"C", b"",
                                    encode(d, "d" * 32)])
        who, frames = self.next()
        assert who == self.worker and frames[:2] == [mdp.WORKER, mdp.W_FINAL]
        assert decode(frames[4]).body == ActionReceived(action_id=action_id,
                                                        attempt_id=d.attempt_id)
        return d


def test_an_input_action_runs_once_its_claim_is_granted() -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    broker = FakeBroker(ctx)
    agent = BenchAgent(ctx, "inproc://mdp", "m1")
    host = broker.host = Host([agent])
    try:
        who, msg_id, _hello = broker.request(AgentHello)
        broker.answer(who, msg_id, Ack())
        while not broker.worker:  # the READY may come after the hello
            broker.next()

        d = broker.dispatch("m1", "s1")
        who, first_id, claim = broker.request(ClaimAttempt)
        assert claim == ClaimAttempt(replay_id=d.replay_id, machine_id="m1", action_id="s1",
                                     attempt_id=d.attempt_id)
        broker.answer(who, first_id, ClaimReply(granted=False, reason="verdict_pending",
                                                retry_in_s=0.005))
        who, second_id, again = broker.request(ClaimAttempt)  # "not yet": asked again
        assert again == claim and second_id != first_id
        assert agent.reported_at == []  # nothing ran before the grant
        broker.answer(who, second_id, ClaimReply(granted=True))
        who, report_id, report = broker.request(ActionReport)
        assert (report.action_id, report.attempt_id, report.success) == (
            "s1", d.attempt_id, True)
        broker.answer(who, report_id, ReportAck(action_id="s1", attempt_id=d.attempt_id,
                                                status="accepted"))

        d2 = broker.dispatch("m1", "s2")
        who, claim_id, _claim = broker.request(ClaimAttempt)
        broker.answer(who, claim_id, ClaimReply(granted=True))
        who, report_id, _report = broker.request(ActionReport)
        assert len(agent.overheads) == 1  # report -> the next claim granted
        broker.answer(who, report_id, ReportAck(action_id="s2", attempt_id=d2.attempt_id,
                                                status="accepted"))

        broker.dispatch("m1", "s3")
        who, claim_id, _claim = broker.request(ClaimAttempt)
        broker.answer(who, claim_id, ClaimReply(granted=False, reason="not_current"))
        assert host.run_until(lambda: agent.settled, 10)
        assert agent.refused == 1 and len(agent.reported_at) == 2  # refused: not run
        assert agent.accepted == 2
    finally:
        host.close()
        broker.router.close(0)
        ctx.term()

"""A grant is good only while the watchdog still waits for its attempt.

A grant can wait in a frozen agent's socket, or a frozen agent, while the watchdog resends
the step or gives it up and the replay pauses for a person: acted on then, it would be an
input after the pause. The dispatcher says how long the grant is good for (the watchdog's
patience left), and the agent does not act on a grant it reads later than that after asking
(docs/protocol.md, "Writing an agent").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from actors.dispatcher.machine.agent_inputs import GRANT_MARGIN_S, RESEND_DUE
from actors.dispatcher.machine.state import DispatcherConfig
from agent.protocol.asks import GRANT_EXPIRED, Asks
from agent.protocol.ledger import Ledger
from agent.protocol.outbox import Outbox
from messages.codec import decode, encode
from messages.dispatch import ClaimAttempt, ClaimReply
from tests.unit.test_agent_outbox import Dispatcher, dispatch
from tests.unit.test_dispatcher_core import H, wf
from transport.client import Client


def claim_now(h: H, rid: str) -> ClaimReply:
    e = h.cur(rid)
    d = h.core.claim(ClaimAttempt(replay_id=rid, machine_id=e.machine_id,
                                  action_id=e.action.action_id, attempt_id=e.attempt_id),
                     e.machine_id, h.now)
    assert isinstance(d.reply, ClaimReply)
    return d.reply


@pytest.mark.parametrize("patience_s, claimed_after_s", [(0.0, 10.0), (120.0, 100.0)])
def test_a_grant_is_good_for_the_watchdogs_patience_left(patience_s: float,
                                                         claimed_after_s: float) -> None:
    """The patience an agent asked for (a window guard waiting for a person) counts."""
    h = H(DispatcherConfig(orphan_timeout_s=45.0))
    rid, _ = h.start(wf("s1", "s2"))
    h.cur(rid).patience_s = patience_s
    h.tick(claimed_after_s)
    reply = claim_now(h, rid)
    assert reply.granted and reply.valid_s == pytest.approx(
        45.0 + patience_s - claimed_after_s - GRANT_MARGIN_S)


def test_a_claim_at_the_watchdogs_deadline_is_refused_and_not_claimed() -> None:
    h = H(DispatcherConfig(orphan_timeout_s=45.0))
    rid, _ = h.start(wf("s1"))
    h.tick(45.0 - GRANT_MARGIN_S)
    reply = claim_now(h, rid)
    assert not reply.granted and reply.reason == RESEND_DUE
    assert not h.cur(rid).claimed  # its give-up will say it never ran


def test_without_a_watchdog_a_grant_has_no_limit() -> None:
    h = H(DispatcherConfig(orphan_timeout_s=None))
    rid, _ = h.start(wf("s1"))
    h.tick(3600.0)
    reply = claim_now(h, rid)
    assert reply.granted and reply.valid_s is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def asked(tmp_path: Path) -> Iterator[tuple[Dispatcher, Client, Asks, Clock]]:
    ctx: zmq.Context[Any] = zmq.Context()
    dispatcher = Dispatcher(ctx, "inproc://mdp")
    client = Client(ctx, "inproc://mdp")
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    clock = Clock()
    yield dispatcher, client, Asks(Outbox(client), ledger, "m1", clock), clock
    ledger.close()
    client.close()
    dispatcher.router.close(0)
    ctx.term()


@pytest.mark.parametrize("read_after_s, acted", [(1.9, True), (2.0, False), (600.0, False)])
def test_the_agent_acts_on_a_grant_only_within_its_time(
        asked: tuple[Dispatcher, Client, Asks, Clock], read_after_s: float,
        acted: bool) -> None:
    dispatcher, client, asks, clock = asked
    answers: list[tuple[bool, str | None]] = []
    asks.claim(dispatch(), lambda granted, why: answers.append((granted, why)))
    who, payload = dispatcher.request()
    question = decode(payload)
    assert isinstance(question.body, ClaimAttempt)
    dispatcher.answer(who, encode(ClaimReply(granted=True, valid_s=2.0), question.id))
    clock.now += read_after_s  # the agent was frozen with the grant in its socket
    assert client.socket.poll(10_000)
    client.drain()
    assert answers == [(True, None) if acted else (False, GRANT_EXPIRED)]


def test_a_grant_without_a_limit_is_acted_on_however_late(
        asked: tuple[Dispatcher, Client, Asks, Clock]) -> None:
    dispatcher, client, asks, clock = asked
    answers: list[tuple[bool, str | None]] = []
    asks.claim(dispatch(), lambda granted, why: answers.append((granted, why)))
    who, payload = dispatcher.request()
    dispatcher.answer(who, encode(ClaimReply(granted=True), decode(payload).id))
    clock.now += 3600.0
    assert client.socket.poll(10_000)
    client.drain()
    assert answers == [(True, None)]

"""The role of a dispatcher sharing PostgreSQL (actors/dispatcher/role.py): who competes for
the leader's lock, when a leader steps down, and how a broker's ``mmi.broker`` answer is
read. A standby must never try the lock while its broker does not serve (it would lead on a
server nothing reaches); a leader must give it back as soon as its broker stops serving."""

from __future__ import annotations

import json

import pytest

from actors.dispatcher.role import (
    BrokerSaid,
    Do,
    Role,
    after_try,
    broker_said,
    broker_serves,
    decide,
)

S, L = Role.STANDBY, Role.LEADER


def answer(**said: object) -> list[bytes]:
    return [json.dumps(said).encode()]


@pytest.mark.parametrize(("frames", "role", "state", "serves"), [
    (answer(role="alone", state="active"), "alone", "active", True),
    (answer(role="primary", state="active", peer_state="passive"), "primary", "active", True),
    (answer(role="backup", state="passive"), "backup", "passive", False),
    (answer(role="primary", state="primary"), "primary", "primary", False),  # deciding
    ([b"501"], "alone", "active", True),  # a broker from before mmi.broker
])
def test_an_answer_says_whether_the_broker_serves(frames: list[bytes], role: str, state: str,
                                                  serves: bool) -> None:
    said = broker_said(frames, 7.0)
    assert said == BrokerSaid(role, state, 7.0)
    assert said.serves is serves


@pytest.mark.parametrize("frames", [
    [b"not json"], [b"\xff"], [b"[]"], answer(role=3, state="active"), answer(role="alone"),
    [b"{}", b"{}"], [],
])
def test_an_unreadable_answer_says_nothing(frames: list[bytes]) -> None:
    assert broker_said(frames, 0.0) is None


def test_an_answer_older_than_the_silence_allowed_says_nothing() -> None:
    said = BrokerSaid("alone", "active", 10.0)
    assert broker_serves(said, 12.0, 2.0) is True
    assert broker_serves(said, 12.5, 2.0) is None
    assert broker_serves(None, 0.0, 2.0) is None
    assert broker_serves(BrokerSaid("backup", "passive", 10.0), 10.5, 2.0) is False


def test_a_standby_tries_the_lock_only_while_its_broker_serves() -> None:
    assert decide(S, True) is Do.TRY_LOCK
    assert decide(S, False) is Do.WAIT
    assert decide(S, None) is Do.WAIT


def test_the_lock_makes_the_leader() -> None:
    assert after_try(True) == (L, Do.LEAD)
    assert after_try(False) == (S, Do.WAIT)


def test_a_leader_steps_down_when_its_broker_stops_serving_or_falls_silent() -> None:
    assert decide(L, True) is Do.WAIT
    assert decide(L, False) is Do.STEP_DOWN
    assert decide(L, None) is Do.STEP_DOWN

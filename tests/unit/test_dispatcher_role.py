"""The role of a dispatcher sharing PostgreSQL (actors/dispatcher/role.py): who competes for
the leader's lock, when a leader steps down, how a broker's ``mmi.broker`` answer is read;
and the lock itself on a real server (election.py). A standby must never try the lock while
its broker does not serve (it would lead on a server nothing reaches); a leader must give
it back as soon as its broker stops serving."""

from __future__ import annotations

import json

import psycopg
import pytest

from actors.dispatcher.election import try_lock
from actors.dispatcher.pg_store import PgDb
from actors.dispatcher.role import (
    BrokerSaid,
    Do,
    Role,
    after_try,
    broker_said,
    brokers_serve,
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
    assert brokers_serve([said], 12.0, 2.0) is True
    assert brokers_serve([said], 12.5, 2.0) is None
    assert brokers_serve([None], 0.0, 2.0) is None
    assert brokers_serve([], 0.0, 2.0) is None
    assert brokers_serve([BrokerSaid("backup", "passive", 10.0)], 10.5, 2.0) is False


def test_with_a_pair_on_one_host_either_door_serving_is_enough() -> None:
    """The tree's door and the other broker's (``LEA_TREE_BACKUP_ENDPOINT``): the
    dispatcher's workers go to the one that serves."""
    passive, active = BrokerSaid("primary", "passive", 10.0), BrokerSaid("backup", "active", 9.0)
    assert brokers_serve([passive, active], 10.5, 2.0) is True
    assert brokers_serve([passive, None], 10.5, 2.0) is False
    assert brokers_serve([passive, active], 11.5, 2.0) is False  # the active one fell silent


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


def test_the_lock_is_held_by_one_session_and_ends_with_it(pg_url: str) -> None:
    """The fence, on a real server: one session holds the leader's lock, others are refused
    it; when the leader's session ends (the server drops it, as for a host cut off) its
    commits fail and another takes the lock."""
    lost: list[BaseException] = []
    leader = PgDb.connect(pg_url, on_lost=lost.append)
    standby = PgDb.connect(pg_url)
    assert try_lock(leader) is True
    assert try_lock(standby) is False
    assert try_lock(standby) is False
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_locks "
                      "WHERE locktype = 'advisory' AND granted")
    with pytest.raises(psycopg.OperationalError):
        leader.begin()
        leader.execute("INSERT INTO meta VALUES ('deposed', 'x')")
        leader.commit()
    assert len(lost) == 1
    assert try_lock(standby) is True
    assert standby.execute("SELECT count(*) FROM meta WHERE key = 'deposed'").fetchone()[0] == 0
    standby.close()

"""The role of a dispatcher sharing PostgreSQL (actors/dispatcher/leader/role.py): who competes for
the leader's lease, when a leader steps down, how a broker's ``mmi.broker`` answer is read;
and the lease and its fencing token on a real server (lease.py). A standby must never try
the lease while its broker does not serve (it would lead on a server nothing reaches); a
leader must leave it as soon as its broker stops serving; a leader cut off is replaced at
its lease's end, and nothing it began commits after."""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from actors.dispatcher.leader.role import (
    BrokerSaid,
    Do,
    Role,
    after_try,
    broker_said,
    brokers_serve,
    decide,
)
from actors.dispatcher.store import lease
from actors.dispatcher.store.postgres import PgDb
from tests.conftest import wait_until

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


def test_one_session_holds_the_lease_and_a_killed_leaders_is_taken_at_once(
        pg_url: str) -> None:
    """A live leader's lease is nobody else's; when its session ends (kill -9 of the
    leader) a standby takes the lease at once, long before it would expire."""
    leader, standby = PgDb.connect(pg_url), PgDb.connect(pg_url)
    try:
        assert lease.take(leader, hold_s=600) is True
        first = leader.fence_token
        assert first is not None
        assert lease.take(standby, hold_s=600) is False
        assert lease.renew(leader, hold_s=600) is True
        assert lease.take(standby, hold_s=600) is False
        leader.close()  # its backend ends a moment later: the standby's next look takes it
        wait_until(lambda: lease.take(standby, hold_s=600), timeout=10, interval=0.05)
        assert standby.fence_token == first + 1
    finally:
        standby.close()


def test_an_expired_lease_is_taken_over_and_the_cut_off_leaders_turn_never_commits(
        pg_url: str) -> None:
    """The leader cut off in the middle of a turn (its transaction open, the lease's row
    held by its fence): once the lease expired a standby ends that session, takes the lease
    without waiting for the server's TCP keepalives, and the old turn never commits."""
    lost: list[BaseException] = []
    leader = PgDb.connect(pg_url, on_lost=lost.append)
    standby = PgDb.connect(pg_url)
    standby.execute("SET lock_timeout = '5s'")  # a lock left to the old session: fails
    try:
        assert lease.take(leader, hold_s=0.5) is True
        leader.begin()
        leader.execute("INSERT INTO meta VALUES ('deposed', 'x')")
        # No renewal comes: the standby's looks take the lease once it has expired.
        wait_until(lambda: lease.take(standby), timeout=10, interval=0.05)
        with pytest.raises(psycopg.OperationalError):
            leader.commit()
        assert len(lost) == 1
        assert standby.execute("SELECT count(*) FROM meta WHERE key = 'deposed'"
                               ).fetchone()[0] == 0
        assert lease.renew(standby) is True
    finally:
        standby.close()


@pytest.mark.parametrize("answered_before", ["insert", "commit"])
def test_a_deposed_leaders_turn_fails_its_fence_and_its_renewal(pg_url: str,
                                                                answered_before: str) -> None:
    """A session that still believes it leads, with an old token (another took the lease
    since): the turn it begins is refused in its own transaction, its renewal too, wherever
    the server's refusal reaches the pipeline (the pause lets it arrive before that
    statement is sent); the session is usable after its rollback."""
    old, new = PgDb.connect(pg_url), PgDb.connect(pg_url)
    try:
        assert lease.take(old, hold_s=600) is True
        stale = old.fence_token
        old.close()  # its session is gone: the other takes over at once
        wait_until(lambda: lease.take(new, hold_s=600), timeout=10, interval=0.05)
        believer = PgDb.connect(pg_url)
        believer.fence_token = stale
        with pytest.raises(psycopg.Error) as refused:
            believer.begin()
            if answered_before == "insert":
                time.sleep(0.3)
            believer.execute("INSERT INTO meta VALUES ('deposed', 'x')")
            if answered_before == "commit":
                time.sleep(0.3)
            believer.commit()
        assert refused.value.sqlstate == lease.DEPOSED
        believer.rollback()
        assert lease.renew(believer) is False
        assert new.execute("SELECT count(*) FROM meta WHERE key = 'deposed'"
                           ).fetchone()[0] == 0
        new.begin()  # the leader's own turns pass the fence
        new.execute("INSERT INTO meta VALUES ('led', 'x')")
        new.commit()
        believer.close()
    finally:
        new.close()

"""The Binary Star state machine (broker/binary_star.py): every transition, and the cases
where a broker must not become active (two active brokers would run a step twice)."""

from __future__ import annotations

import pytest

from broker.binary_star import (
    Effect,
    Note,
    Pair,
    Role,
    State,
    Step,
    describe,
    on_peer,
    on_request,
    on_tick,
    start,
)

E = 3.0  # the peer's expiry
P, B = Role.PRIMARY, Role.BACKUP


def effects(step: Step) -> list[Effect]:
    return [o for o in step[1] if isinstance(o, Effect)]


def notes(step: Step) -> list[str]:
    return [o.kind for o in step[1] if isinstance(o, Note)]


def at(role: Role, state: State, heard_at: float = 0.0) -> Pair:
    """A broker in ``state`` that last heard its peer at ``heard_at``."""
    return Pair(role, state, E, heard_at + E, heard_at=heard_at)


def test_start_in_its_role_and_not_serving() -> None:
    for role in Role:
        pair = start(role, 10.0, E)
        assert pair.state.value == role.value
        assert not pair.serving
        assert pair.peer_expiry == 10.0 + E


# PRIMARY ---------------------------------------------------------------------------------------

def test_primary_hearing_the_backup_becomes_active_and_serves_what_it_held() -> None:
    step = on_peer(start(P, 0.0, E), B, State.BACKUP, 0.5)
    assert step[0].state is State.ACTIVE
    assert effects(step) == [Effect.SERVE_HELD]
    assert notes(step) == ["state"]


def test_primary_hearing_an_active_backup_becomes_passive() -> None:
    step = on_peer(start(P, 0.0, E), B, State.ACTIVE, 0.5)
    assert step[0].state is State.PASSIVE
    assert effects(step) == [Effect.REFUSE_HELD]


def test_primary_hearing_a_passive_backup_waits_for_it_to_take_over() -> None:
    step = on_peer(start(P, 0.0, E), B, State.PASSIVE, 0.5)
    assert step[0].state is State.PRIMARY and effects(step) == []


def test_primary_alone_holds_requests_until_its_peer_is_lost() -> None:
    pair = start(P, 0.0, E)
    pair, out = on_request(pair, 1.0)
    assert pair.state is State.PRIMARY and list(out) == [Effect.HOLD]
    step = on_tick(pair, E - 0.01)
    assert step[0].state is State.PRIMARY
    step = on_tick(pair, E)
    assert step[0].state is State.ACTIVE and effects(step) == [Effect.SERVE_HELD]


def test_primary_alone_without_requests_does_not_take_over() -> None:
    assert on_tick(start(P, 0.0, E), 100.0)[0].state is State.PRIMARY


def test_primary_alone_takes_over_on_a_request_after_the_expiry() -> None:
    step = on_request(start(P, 0.0, E), E + 1)
    assert step[0].state is State.ACTIVE
    assert effects(step) == [Effect.SERVE_HELD, Effect.SERVE]


# BACKUP ----------------------------------------------------------------------------------------

def test_backup_hearing_an_active_primary_becomes_passive() -> None:
    step = on_peer(start(B, 0.0, E), P, State.ACTIVE, 0.5)
    assert step[0].state is State.PASSIVE and effects(step) == [Effect.REFUSE_HELD]


@pytest.mark.parametrize("peer_state", [State.PRIMARY, State.PASSIVE])
def test_backup_waits_for_the_primary_to_decide(peer_state: State) -> None:
    step = on_peer(start(B, 0.0, E), P, peer_state, 0.5)
    assert step[0].state is State.BACKUP and effects(step) == []


def test_backup_that_never_saw_the_primary_never_serves() -> None:
    pair = start(B, 0.0, E)
    for now in (1.0, E, 10 * E, 1000.0):
        pair, out = on_request(pair, now)
        assert list(out) == [Effect.REFUSE]
        pair, out = on_tick(pair, now)
        assert pair.state is State.BACKUP and not out


# ACTIVE ----------------------------------------------------------------------------------------

def test_active_serves_every_request() -> None:
    assert effects(on_request(at(P, State.ACTIVE), 100.0)) == [Effect.SERVE]


@pytest.mark.parametrize("peer_state", [State.PRIMARY, State.BACKUP, State.PASSIVE])
def test_active_stays_active_while_its_peer_restarts_or_waits(peer_state: State) -> None:
    for role, peer in ((P, B), (B, P)):
        if peer_state.value == role.value:
            continue  # a peer in our role's state would be misconfigured
        step = on_peer(at(role, State.ACTIVE), peer, peer_state, 1.0)
        assert step[0].state is State.ACTIVE and not step[1]


def test_two_active_brokers_the_backup_steps_down_and_forgets() -> None:
    step = on_peer(at(B, State.ACTIVE), P, State.ACTIVE, 1.0)
    assert step[0].state is State.PASSIVE
    assert effects(step) == [Effect.FORGET]
    assert "split_brain" in notes(step)


def test_two_active_brokers_the_primary_keeps_serving() -> None:
    step = on_peer(at(P, State.ACTIVE), B, State.ACTIVE, 1.0)
    assert step[0].state is State.ACTIVE
    assert effects(step) == [] and notes(step) == ["split_brain"]


# PASSIVE ---------------------------------------------------------------------------------------

def test_passive_holds_a_request_while_its_peer_is_alive() -> None:
    step = on_request(at(B, State.PASSIVE, heard_at=10.0), 10.5)
    assert step[0].state is State.PASSIVE and effects(step) == [Effect.HOLD]


def test_passive_turns_away_what_it_held_when_its_peer_is_heard_active() -> None:
    pair, _ = on_request(at(B, State.PASSIVE, heard_at=10.0), 10.5)
    step = on_peer(pair, P, State.ACTIVE, 11.0)
    assert step[0].state is State.PASSIVE and effects(step) == [Effect.REFUSE_HELD]
    # Its peer is alive again: the expiry counts from now, and what came before is no cause.
    assert on_tick(step[0], 11.0 + E - 0.01)[0].state is State.PASSIVE
    assert on_tick(step[0], 11.0 + E)[0].state is State.PASSIVE


def test_passive_takes_over_on_a_request_once_its_peer_is_lost() -> None:
    step = on_request(at(B, State.PASSIVE, heard_at=10.0), 10.0 + E)
    assert step[0].state is State.ACTIVE
    assert effects(step) == [Effect.SERVE_HELD, Effect.SERVE]


def test_passive_takes_over_at_the_expiry_for_a_peer_that_came_early() -> None:
    pair, _ = on_request(at(P, State.PASSIVE, heard_at=10.0), 11.0)
    assert on_tick(pair, 10.0 + E - 0.01)[0].state is State.PASSIVE
    step = on_tick(pair, 10.0 + E)
    assert step[0].state is State.ACTIVE and effects(step) == [Effect.SERVE_HELD]


def test_passive_that_lost_its_peer_waits_for_a_peer_to_come() -> None:
    """Lost the peer broker, but no client nor worker came: the other broker may still be
    serving them (a cut between the two brokers only): stay passive."""
    pair = at(B, State.PASSIVE, heard_at=10.0)
    for now in (10.0 + E, 100.0, 10_000.0):
        pair, out = on_tick(pair, now)
        assert pair.state is State.PASSIVE and not out


def test_passive_does_not_count_a_peer_that_came_before_its_peer_was_last_heard() -> None:
    pair, _ = on_request(at(B, State.PASSIVE, heard_at=10.0), 10.5)
    pair, _ = on_peer(pair, P, State.ACTIVE, 11.0)
    assert on_tick(pair, 11.0 + 10 * E)[0].state is State.PASSIVE


@pytest.mark.parametrize("peer_state", [State.PRIMARY, State.BACKUP])
def test_passive_takes_over_when_its_peer_restarts(peer_state: State) -> None:
    role, peer = (B, P) if peer_state is State.PRIMARY else (P, B)
    step = on_peer(at(role, State.PASSIVE), peer, peer_state, 1.0)
    assert step[0].state is State.ACTIVE and effects(step) == [Effect.SERVE_HELD]


def test_two_passive_brokers_the_primary_serves() -> None:
    step = on_peer(at(P, State.PASSIVE), B, State.PASSIVE, 1.0)
    assert step[0].state is State.ACTIVE and "split_brain" in notes(step)
    step = on_peer(at(B, State.PASSIVE), P, State.PASSIVE, 1.0)
    assert step[0].state is State.PASSIVE and not step[1]


# Misconfiguration ------------------------------------------------------------------------------

@pytest.mark.parametrize("role", list(Role))
def test_a_peer_in_our_own_role_keeps_both_from_serving(role: Role) -> None:
    pair = start(role, 0.0, E)
    for now in (0.5, 1.5, 2.5, 3.5, 4.5, 100.0):
        pair, out = on_peer(pair, role, State(role.value), now)
        assert "misconfigured" in [o.kind for o in out if isinstance(o, Note)]
        pair, out = on_request(pair, now + 0.1)
        assert Effect.SERVE not in out
        pair, _ = on_tick(pair, now + 0.2)
        assert not pair.serving


def test_an_active_broker_whose_peer_claims_its_role_steps_down() -> None:
    step = on_peer(at(P, State.ACTIVE), P, State.PASSIVE, 1.0)
    assert step[0].state is State.PASSIVE and Effect.FORGET in effects(step)


# Never two active ------------------------------------------------------------------------------

def test_a_pair_exchanging_heartbeats_has_exactly_one_active_broker() -> None:
    """Both brokers start, hear each other every second, peers come to both: one serves."""
    a, b = start(P, 0.0, E), start(B, 0.3, E)
    for i in range(50):
        now = 0.5 + i
        a, _ = on_peer(a, B, b.state, now)
        b, _ = on_peer(b, P, a.state, now + 0.1)
        a, _ = on_request(a, now + 0.2)
        b, _ = on_request(b, now + 0.3)
        a, _ = on_tick(a, now + 0.4)
        b, _ = on_tick(b, now + 0.4)
        if i >= 2:
            assert [a.serving, b.serving].count(True) == 1, (i, a.state, b.state)
    assert a.serving


def test_failover_then_the_primary_comes_back_passive() -> None:
    a, b = on_peer(start(P, 0.0, E), B, State.BACKUP, 0.5)[0], start(B, 0.0, E)
    b, _ = on_peer(b, P, State.ACTIVE, 0.6)
    assert a.serving and b.state is State.PASSIVE
    # a dies at 1.0 (last heard at 0.6): b takes over once it lost a and a peer came.
    b, _ = on_request(b, 2.0)
    assert not b.serving
    b, _ = on_tick(b, 0.6 + E)
    assert b.serving
    # a restarts: primary, hears b active, goes passive; b stays active.
    a = start(P, 10.0, E)
    a, _ = on_peer(a, B, State.ACTIVE, 10.2)
    b, _ = on_peer(b, P, State.PRIMARY, 10.1)
    assert b.serving and a.state is State.PASSIVE


# A server cut off (its link down), then back ---------------------------------------------------

def test_a_peer_of_its_own_host_never_makes_a_broker_take_over() -> None:
    """The tree's own processes (through its door) reach it whatever the network does."""
    pair = at(B, State.PASSIVE, heard_at=10.0)
    for now in (10.5, 10.0 + E, 100.0):
        pair, out = on_request(pair, now, counts=False)
        assert out == (Effect.HOLD,)
        pair, _ = on_tick(pair, now)
        assert pair.state is State.PASSIVE


def test_an_active_broker_cut_off_steps_down_and_forgets() -> None:
    """Neither its peer broker nor any peer heard for the expiry: its link is down."""
    pair, _ = on_request(at(P, State.ACTIVE, heard_at=10.0), 10.5)
    pair, _ = on_request(pair, 10.4 + E, counts=False)  # its own tree still talks to it
    assert on_tick(pair, 10.5 + E - 0.01)[0].state is State.ACTIVE  # a peer came lately
    step = on_tick(pair, 10.5 + E)
    assert step[0].state is State.PASSIVE and effects(step) == [Effect.FORGET]


def test_an_active_broker_that_still_hears_its_peer_or_its_peers_serves_on() -> None:
    pair = at(P, State.ACTIVE, heard_at=10.0)
    assert on_tick(pair, 10.0 + E - 0.01)[0].state is State.ACTIVE  # its peer broker: heard
    pair, _ = on_request(pair, 10.0 + E)
    assert on_tick(pair, 10.0 + E + 1)[0].state is State.ACTIVE  # a peer came


def test_cut_off_then_back_the_broker_stays_passive_while_the_other_serves() -> None:
    """Server A's link goes down: B takes over with the peers; A steps down. The link comes
    back: A hears B active and stays passive; only a later failure of B moves it."""
    a, _ = on_peer(start(P, 0.0, E), B, State.BACKUP, 0.5)
    b, _ = on_peer(start(B, 0.0, E), P, State.ACTIVE, 0.6)
    a, _ = on_request(a, 1.0)
    assert a.serving and not b.serving
    # The cut at 1.0: each hears nothing of the other; the peers go to b.
    b, _ = on_request(b, 2.0)
    b, _ = on_tick(b, 0.6 + E)
    a, _ = on_request(a, 3.0, counts=False)
    a, _ = on_tick(a, 1.0 + E + 0.01)
    assert b.serving and a.state is State.PASSIVE
    a, _ = on_request(a, 6.0, counts=False)
    a, _ = on_tick(a, 6.1)
    assert a.state is State.PASSIVE  # no peer came from outside: it does not serve again
    # The link is back.
    a, out = on_peer(a, B, State.ACTIVE, 10.0)
    b, _ = on_peer(b, P, State.PASSIVE, 10.0)
    assert a.state is State.PASSIVE and Effect.REFUSE_HELD in out and b.serving
    a, _ = on_request(a, 10.5)
    a, _ = on_tick(a, 10.6)
    assert a.state is State.PASSIVE and b.serving


def test_back_from_a_cut_a_peer_before_the_peer_brokers_state_does_not_make_it_serve() -> None:
    """The link comes back: an agent's message may arrive before the other broker's state."""
    pair, _ = on_tick(on_request(at(P, State.ACTIVE, heard_at=0.0), 0.5)[0], 0.5 + E + 0.01)
    assert pair.state is State.PASSIVE and pair.cut_off
    pair, out = on_request(pair, 20.0)
    assert pair.state is State.PASSIVE and out == (Effect.HOLD,)
    pair, out = on_peer(pair, B, State.ACTIVE, 20.4)
    assert pair.state is State.PASSIVE and Effect.REFUSE_HELD in out


def test_a_broker_cut_off_serves_again_when_a_peer_comes_and_its_peer_stays_lost() -> None:
    """The other server died meanwhile: the peers come back, and after an expiry it serves."""
    pair, _ = on_tick(on_request(at(P, State.ACTIVE, heard_at=0.0), 0.5)[0], 0.5 + E + 0.01)
    pair, _ = on_request(pair, 20.0)
    assert on_tick(pair, 20.0 + E - 0.01)[0].state is State.PASSIVE
    step = on_tick(pair, 20.0 + E)
    assert step[0].serving and effects(step) == [Effect.SERVE_HELD]


def test_describe_says_role_state_and_peer() -> None:
    pair = on_peer(start(B, 0.0, E), P, State.ACTIVE, 1.0)[0]
    assert describe(pair, 1.5) == {"role": "backup", "state": "passive",
                                   "peer_state": "active", "peer_heard_s_ago": 0.5}
    assert describe(start(P, 0.0, E), 1.0)["peer_heard_s_ago"] is None

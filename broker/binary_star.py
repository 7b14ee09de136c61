"""The Binary Star state machine of a broker pair (ZeroMQ guide, chapter 4), as pure data.

Nothing here opens a socket or reads a clock: the broker (broker/pair_link.py) passes in what
it heard from its peer broker, each peer (client or worker) that came to it, the time, and
applies the effects it gets back. docs/operations.md, "A broker pair", says how it is run.

States: a broker starts as its role, ``primary`` or ``backup``, and becomes ``active`` (it
serves MDP) or ``passive`` (it holds or turns away MDP traffic) from what its peer broker
says of itself. The rules, the guide's with three changes that keep one broker active at a
time where the guide would let two serve:

- a primary that has not yet heard its peer does not serve (the guide's does): it holds what
  comes and becomes active once its peer says ``backup``, or once it has heard nothing of its
  peer for the expiry and a peer (client or worker) comes to it (the backup is down);
- a backup that has never seen an active primary never serves;
- a passive broker becomes active only when it has lost its peer (nothing heard for the
  expiry) *and* a peer came to it after the last time it heard its peer (the guide only looks
  at requests arriving after the expiry; we also take those held meanwhile, so a peer that
  came a little early is not sent back to the broker that died);
- two active brokers (a healed partition) are resolved, not fatal: the backup steps down and
  forgets its workers and queues; two passive ones: the primary takes over;
- a peer broker claiming our own role is a configuration error: we never serve while we hear
  it (two primaries would each take the other for a backup);
- an active broker that has heard neither its peer broker nor any peer for the expiry is cut
  off (its server's link is down): it steps down, so that when the link comes back it finds
  the other serving and stays passive, instead of two active brokers; the first peer that
  comes back to it gives its peer broker a whole expiry to be heard (the peer's message may
  arrive before the peer broker's state) before it may serve again. Peers of its own host
  (its tree's processes, through the tree's door) do not count, for this nor for a takeover:
  they reach it whatever the network does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class Role(StrEnum):
    """What a broker of a pair is configured as (``broker_role``)."""

    PRIMARY = "primary"
    BACKUP = "backup"


class State(StrEnum):
    """Where a broker of a pair stands; the first two are its role before it has decided."""

    PRIMARY = "primary"
    BACKUP = "backup"
    ACTIVE = "active"
    PASSIVE = "passive"


class Effect(StrEnum):
    """What the broker must do after a step."""

    SERVE = "serve"  # hand the message that came to the MDP broker
    HOLD = "hold"  # keep the message that came until the pair has decided
    REFUSE = "refuse"  # turn the message away (a worker gets DISCONNECT: it moves on)
    SERVE_HELD = "serve_held"  # we became active: hand over the held messages, in order
    REFUSE_HELD = "refuse_held"  # our peer serves: turn the held messages away
    FORGET = "forget"  # we stepped down: DISCONNECT our workers, drop our queues


@dataclass(frozen=True, slots=True)
class Note:
    """Something to log and publish: ``kind`` is ``state``, ``split_brain`` or
    ``misconfigured``; ``text`` says what happened."""

    kind: str
    text: str


Outcome = Effect | Note


@dataclass(frozen=True, slots=True)
class Pair:
    """One broker's view of the pair.

    ``peer_expiry``: when the peer broker counts as lost if not heard again; ``heard_at``:
    when we last heard it; ``came_at``: when a peer (client or worker) last came to us.
    """

    role: Role
    state: State
    expiry_s: float
    peer_expiry: float
    heard_at: float = float("-inf")
    came_at: float = float("-inf")
    peer_state: State | None = None
    cut_off: bool = False  # stepped down cut off; no peer broker nor peer heard since

    @property
    def serving(self) -> bool:
        return self.state is State.ACTIVE


Step = tuple[Pair, tuple[Outcome, ...]]


def start(role: Role, now: float, expiry_s: float) -> Pair:
    """A broker that just started: its state is its role; its peer is not lost before
    ``expiry_s`` from now (a primary waits that long for its peer before serving alone)."""
    return Pair(role, State(role.value), expiry_s, now + expiry_s)


def _to(pair: Pair, state: State, why: str, *effects: Outcome) -> Step:
    if state is pair.state:
        return pair, effects
    note = Note("state", f"{pair.state} -> {state}: {why}")
    return replace(pair, state=state), (*effects, note)


def on_peer(pair: Pair, peer_role: Role, peer_state: State, now: float) -> Step:
    """The peer broker said it is ``peer_state`` (its role ``peer_role``)."""
    pair = replace(pair, heard_at=now, peer_expiry=now + pair.expiry_s, peer_state=peer_state,
                   cut_off=False)
    if peer_role is pair.role:
        note = Note("misconfigured", f"the peer broker is also {pair.role}: neither serves "
                    "until one is configured as the other role")
        if pair.state is State.ACTIVE:
            return _to(pair, State.PASSIVE, "misconfigured pair", Effect.FORGET, note)
        return pair, (Effect.REFUSE_HELD, note)
    state = pair.state
    if state is State.PRIMARY:
        if peer_state is State.BACKUP:
            return _to(pair, State.ACTIVE, "the backup is there", Effect.SERVE_HELD)
        if peer_state is State.ACTIVE:
            return _to(pair, State.PASSIVE, "the backup is active", Effect.REFUSE_HELD)
        return pair, ()  # passive: it becomes active on hearing us, then we go passive
    if state is State.BACKUP:
        if peer_state is State.ACTIVE:
            return _to(pair, State.PASSIVE, "the primary is active", Effect.REFUSE_HELD)
        return pair, ()  # the primary decides first (it goes active on hearing us)
    if state is State.ACTIVE:
        if peer_state is State.ACTIVE:
            if pair.role is Role.BACKUP:
                return _to(pair, State.PASSIVE, "two active brokers: the primary keeps serving",
                           Effect.FORGET, Note("split_brain", "the primary is active too"))
            return pair, (Note("split_brain", "the backup is active too: it steps down"),)
        return pair, ()  # the peer is (re)starting or passive: it will stay passive
    # PASSIVE
    if peer_state in (State.PRIMARY, State.BACKUP):
        return _to(pair, State.ACTIVE, f"the {peer_role} restarted", Effect.SERVE_HELD)
    if peer_state is State.PASSIVE:
        if pair.role is Role.PRIMARY:
            return _to(pair, State.ACTIVE, "two passive brokers: the primary serves",
                       Effect.SERVE_HELD, Note("split_brain", "both brokers were passive"))
        return pair, ()
    return pair, (Effect.REFUSE_HELD,)  # the peer serves: those who came here go to it


def _lost(pair: Pair, now: float) -> bool:
    """The peer broker was not heard for the expiry, and a peer came since we last heard it."""
    return now >= pair.peer_expiry and pair.came_at > pair.heard_at


def on_request(pair: Pair, now: float, counts: bool = True) -> Step:
    """A peer (client or worker) sent an MDP message (not ``mmi.*``) to this broker.

    ``counts`` False: a process of this broker's own host (its tree's, through the tree's
    door): it says nothing of whether the other server can be reached, so it never makes
    this broker take over, nor keeps it serving when it is cut off."""
    if counts and pair.cut_off:
        # Back on the network: the peer broker's state may come a little after the first
        # peer; give it a whole expiry to be heard before this broker may serve again.
        pair = replace(pair, cut_off=False,
                       peer_expiry=max(pair.peer_expiry, now + pair.expiry_s))
    if counts:
        pair = replace(pair, came_at=now)
    state = pair.state
    if state is State.ACTIVE:
        return pair, (Effect.SERVE,)
    if state is State.BACKUP:
        return pair, (Effect.REFUSE,)
    if _lost(pair, now):
        return _to(pair, State.ACTIVE, "the peer broker was lost and a peer came",
                   Effect.SERVE_HELD, Effect.SERVE)
    return pair, (Effect.HOLD,)


def on_tick(pair: Pair, now: float) -> Step:
    """Time passed: a primary or passive broker holding a peer takes over once its peer broker
    is lost; an active broker that has heard neither its peer broker nor any peer for the
    expiry is cut off, and steps down (module docstring)."""
    if pair.state in (State.PRIMARY, State.PASSIVE) and _lost(pair, now):
        return _to(pair, State.ACTIVE, "the peer broker was lost and a peer came",
                   Effect.SERVE_HELD)
    if pair.state is State.ACTIVE and _cut_off(pair, now):
        # The peers it had are gone: only one that comes from now on makes it serve again.
        return _to(replace(pair, came_at=float("-inf"), cut_off=True), State.PASSIVE,
                   "cut off: neither the peer broker nor any peer heard for the expiry",
                   Effect.FORGET)
    return pair, ()


def _cut_off(pair: Pair, now: float) -> bool:
    return now >= pair.peer_expiry and now >= pair.came_at + pair.expiry_s


def describe(pair: Pair, now: float) -> dict[str, object]:
    """What a metrics collector or an operator reads of the pair (``mmi.broker``)."""
    return {"role": pair.role.value, "state": pair.state.value,
            "peer_state": pair.peer_state.value if pair.peer_state else None,
            "peer_heard_s_ago": None if pair.heard_at == float("-inf")
            else round(now - pair.heard_at, 3)}

"""A broker of a pair: its state heartbeat to the other broker, and what it does with the MDP
traffic while it does not serve (docs/operations.md, "A broker pair").

The decisions are :mod:`broker.binary_star`'s; this is their I/O. Each broker publishes its
role and state on a PUB socket (``broker_state_endpoint``) every heartbeat interval and at
each change, and reads its peer's on a SUB (``broker_peer_state_endpoint``). One frame:
``lea-bstar/1 <role> <state>``. The MDP messages a broker receives while it has not decided
(or is passive and its peer may be dead) are held, in order, and either handed to the MDP
broker when it becomes active or turned away when its peer serves: a worker is sent
DISCONNECT (it reconnects to the other broker, transport/worker.py), a client's request is
dropped (its retry goes to the other broker, transport/client.py). ``mmi.*`` requests are
answered in every state and never count as a peer coming: a metrics scrape is no failover.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import zmq
from loguru import logger

from broker.binary_star import (
    Effect,
    Note,
    Outcome,
    Pair,
    Role,
    State,
    describe,
    on_peer,
    on_request,
    on_tick,
    start,
)
from broker.tree_door import TREE_USER_ID
from runtime.settings import Settings
from transport.frames import recv_frames, send_frames, user_id
from transport.mdp import CLIENT, MMI_PREFIX, W_DISCONNECT, WORKER, passive_disconnect

WIRE = b"lea-bstar/1"
MAX_HELD = 10_000  # messages held while the pair decides; more are turned away
MAX_HELD_BYTES = 64 * 1024 * 1024
STATE_BATCH = 100  # state messages read per look (a flood waits)
MAX_PEERS = 100_000  # connections remembered as counting or not (PairLink._counts)

Message = tuple[list[bytes], zmq.Frame | None]  # frames as the ROUTER gave them, first frame
Serve = Callable[[list[bytes], "zmq.Frame | None"], None]
Bad = Callable[[list[bytes], str], None]
Told = Callable[[Note, Pair], None]


class PairConfigError(ValueError):
    """The pair's settings are incomplete; the message says which."""


def parse_state(frames: list[bytes]) -> tuple[Role, State]:
    """(role, state) of a peer broker's state message; raises ValueError if it is not one."""
    if len(frames) != 1:
        raise ValueError("a broker state message has one frame")
    parts = frames[0].split(b" ")
    if len(parts) != 3 or parts[0] != WIRE:
        raise ValueError("not a broker state message (lea-bstar/1 ROLE STATE)")
    role, state = Role(parts[1].decode("ascii")), State(parts[2].decode("ascii"))
    if state in (State.PRIMARY, State.BACKUP) and state.value != role.value:
        raise ValueError(f"a {role} cannot be in state {state}")
    return role, state


def state_frame(pair: Pair) -> bytes:
    return b" ".join((WIRE, pair.role.value.encode(), pair.state.value.encode()))


class PairLink:
    """The pair's sockets and held messages; ``serve`` hands a message to the MDP broker,
    ``forget`` drops its workers and queues, ``told`` hears each :class:`Note`."""

    def __init__(self, ctx: zmq.Context[Any], settings: Settings, router: zmq.Socket[bytes],
                 now: float, serve: Serve, forget: Callable[[], None], bad: Bad,
                 told: Told) -> None:
        if not settings.broker_state_endpoint or not settings.broker_peer_state_endpoint:
            raise PairConfigError(
                f"broker_role={settings.broker_role} needs LEA_BROKER_STATE_ENDPOINT (where "
                "this broker publishes its state) and LEA_BROKER_PEER_STATE_ENDPOINT (its "
                "peer's)")
        self.settings = settings
        self.router = router
        self.serve, self.forget, self.bad, self.told = serve, forget, bad, told
        self.pair = start(Role(settings.broker_role), now, settings.heartbeat_expiry_s)
        self.held: deque[Message] = deque()
        self.held_bytes = 0
        self.pub: zmq.Socket[bytes] = ctx.socket(zmq.PUB)
        self.sub: zmq.Socket[bytes] = ctx.socket(zmq.SUB)
        self.stats = dict.fromkeys(("held", "refused", "peer_bad"), 0)
        self.touched = False  # something was sent on the ROUTER (broker.py looks again)
        self._peers: dict[bytes, bool] = {}  # routing id -> counts for the pair (_counts)

    def open(self, bind: Callable[[zmq.Socket[bytes], str], None]) -> None:
        interval_ms = self.settings.heartbeat_interval_ms
        for sock in (self.pub, self.sub):
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.CONFLATE, 1)  # only the latest state matters
            # ZMTP heartbeats: a connection through a link that went down is given up at the
            # expiry and made again, so that when the link is back the peer's state comes
            # within a heartbeat (a TCP connection left as it was would wait for TCP's next
            # retransmission, seconds later, while the peers already came back).
            sock.setsockopt(zmq.HEARTBEAT_IVL, interval_ms)
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, interval_ms * self.settings.heartbeat_liveness)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.MAXMSGSIZE, 256)
        bind(self.pub, self.settings.broker_state_endpoint)
        self.sub.connect(self.settings.broker_peer_state_endpoint)

    def close(self) -> None:
        self.pub.close(0)
        self.sub.close(0)

    # -- inputs ------------------------------------------------------------------------------

    def message(self, frames: list[bytes], first: zmq.Frame | None, now: float) -> None:
        """An MDP message the ROUTER received."""
        if (len(frames) > 3 and frames[1] == CLIENT and frames[3].startswith(MMI_PREFIX)):
            self.serve(frames, first)  # answered in every state (module docstring)
            return
        self.pair, out = on_request(self.pair, now, self._counts(frames[0], first))
        self._apply(out, (frames, first))

    def _counts(self, identity: bytes, first: zmq.Frame | None) -> bool:
        """Whether a peer counts for the pair's decisions: not one of the tree's own
        processes (through the tree's door, binary_star.on_request). Asked once per
        connection (a frame without a User-Id costs an exception)."""
        counts = self._peers.get(identity)
        if counts is None:
            if len(self._peers) >= MAX_PEERS:
                self._peers.clear()  # gone peers' identities; the live ones are asked again
            counts = first is None or user_id(first) != TREE_USER_ID
            self._peers[identity] = counts
        return counts

    def drain_state(self) -> bool:
        """Read the peer broker's state messages; True if more may wait."""
        for _ in range(STATE_BATCH):
            try:
                frames = recv_frames(self.sub)
            except zmq.Again:
                return False
            try:
                role, state = parse_state(frames)
            except ValueError as exc:
                self.stats["peer_bad"] += 1
                self.bad([b"", *frames], f"broker state: {exc}")
                continue
            self.pair, out = on_peer(self.pair, role, state, time.monotonic())
            self._apply(out)
        return True

    def tick(self, now: float) -> None:
        """Every heartbeat interval: take over if due, and tell the peer our state."""
        self.pair, out = on_tick(self.pair, now)
        self._apply(out)
        self._publish()

    def describe(self, now: float) -> bytes:
        """The ``mmi.broker`` answer: role, state, peer's state (JSON)."""
        return json.dumps({**describe(self.pair, now), "held": len(self.held),
                           **self.stats}).encode()

    # -- effects -----------------------------------------------------------------------------

    def _apply(self, outcomes: tuple[Outcome, ...], message: Message | None = None) -> None:
        changed = False
        if any(o in (Effect.SERVE_HELD, Effect.REFUSE_HELD, Effect.FORGET) for o in outcomes):
            self.touched = True
        for out in outcomes:
            if isinstance(out, Note):
                changed = changed or out.kind == "state"
                self.told(out, self.pair)
            elif out is Effect.SERVE and message is not None:
                self.serve(*message)
            elif out is Effect.HOLD and message is not None:
                self._hold(message)
            elif out is Effect.REFUSE and message is not None:
                self._refuse([message])
            elif out is Effect.SERVE_HELD:
                held, self.held, self.held_bytes = self.held, deque(), 0
                for frames, first in held:
                    self.serve(frames, first)
            elif out is Effect.REFUSE_HELD:
                held, self.held, self.held_bytes = self.held, deque(), 0
                self._refuse(list(held))
            elif out is Effect.FORGET:
                self.forget()
        if changed:
            self._publish()  # at once: the peer decides from it

    def _hold(self, message: Message) -> None:
        size = sum(map(len, message[0]))
        if len(self.held) >= MAX_HELD or self.held_bytes + size > MAX_HELD_BYTES:
            self._refuse([message])
            return
        self.held.append(message)
        self.held_bytes += size
        self.stats["held"] += 1

    def _refuse(self, messages: list[Message]) -> None:
        """Turn away: DISCONNECT each worker once, saying this broker is passive (it goes to
        the other broker, or comes back within a heartbeat: transport/worker.py); a client's
        request is dropped (its retry goes there)."""
        told: set[bytes] = set()
        for frames, _first in messages:
            self.stats["refused"] += 1
            if len(frames) < 3 or frames[1] != WORKER or frames[2] == W_DISCONNECT:
                continue
            if frames[0] not in told:
                told.add(frames[0])
                with contextlib.suppress(zmq.ZMQError):  # gone already: nothing to tell
                    send_frames(self.router, [frames[0], *passive_disconnect()])

    def _publish(self) -> None:
        with contextlib.suppress(zmq.Again):
            self.pub.send(state_frame(self.pair), zmq.NOBLOCK)


def log_note(note: Note, pair: Pair) -> None:
    """The log line of a :class:`Note` (a split brain or a bad configuration is an error)."""
    level = "INFO" if note.kind == "state" else "ERROR"
    logger.log(level, "broker pair ({}): {}", pair.role, note.text)

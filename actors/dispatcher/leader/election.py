"""Leader election among dispatchers sharing one PostgreSQL database, fenced by the
database (docs/operations.md, "Several dispatchers"; the rules: role.py; the lease and its
fencing token: actors/dispatcher/store/lease.py).

The leader holds a lease in the database, renewed every :data:`lease.RENEW_EVERY_S`; a
standby takes it over when the leader's session is gone (kill -9) or its lease expired (a
leader cut off: it is replaced at the lease's end, :func:`lease.lease_s`, whatever the
server's TCP keepalives). Every turn of a leader checks its fencing token in its own
transaction, so a deposed leader's next commit fails (the dispatcher then stops,
actors/dispatcher/process.py) and no two dispatchers ever commit decisions at once, whoever
believes what.

A standby (:func:`wait_to_lead`) runs a small loop of its own before the actor is built: no
worker registers the ``dispatcher`` service, the supervisor's beacon beats, its role is
logged and published (``lea:dispatcher_role``), and while its own broker serves it tries
the lease every :data:`TRY_EVERY_S`. Once it holds it, the dispatcher loads the state from
the database (the recovery of a restart) and serves. A leader (:class:`Leadership`) renews
its lease and watches its broker: when the broker no longer serves, or the lease is no
longer ours, the leader steps down (the process exits with :data:`STEPPED_DOWN_EXIT`; the
supervisor starts it again, a standby).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import zmq
from loguru import logger

from actors.base import Actor
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
from actors.dispatcher.store.lease import LeaseDb
from messages.events import DISPATCHER_ROLE
from runtime.settings import Settings
from transport import mdp
from transport.bus import Publisher
from transport.frames import recv_frames
from transport.poll_loop import PollLoop, Timers

TRY_EVERY_S = 0.25
"""How often a standby whose broker serves tries the lease."""
ASK_EVERY_S = 0.5
"""How often our broker is asked whether it serves (``mmi.broker``)."""
ANSWER_S = 1.0
"""An ask not answered in this time is given up (a new socket: the broker may have
restarted)."""
FRESH_S = 2.0
"""A standby tries the lease only on an answer this recent."""
ROLE_EVERY_S = 5.0
"""``lea:dispatcher_role`` is told again this often (the bus keeps nothing)."""
STEPPED_DOWN_EXIT = 3
"""Exit status of a leader that stepped down: the supervisor starts it again, a standby."""


SILENT_MIN_S = 5.0
"""The least silence of its broker a leader waits out: a broker slow for a moment (a loaded
host) must not cost a restart of the dispatcher."""


def silent_s(settings: Settings) -> float:
    """How long a leader's broker may say nothing before the leader steps down: twice the
    time its workers take to give the broker up, :data:`SILENT_MIN_S` at least."""
    return max(2 * settings.heartbeat_expiry_s, SILENT_MIN_S)


class BrokerWatch:
    """Asks our own broker (the tree's door) ``mmi.broker`` every :data:`ASK_EVERY_S`, one
    question at a time; :attr:`said` is its last answer. A part of a poll loop
    (``watch`` its :attr:`socket`, ``add`` it for its ticks)."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str) -> None:
        self._ctx = ctx
        self._endpoint = endpoint
        self.socket = self._connect()
        self.said: BrokerSaid | None = None
        self._asked_at: float | None = None
        self._next = time.monotonic()

    def _connect(self) -> zmq.Socket[bytes]:
        sock: zmq.Socket[bytes] = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self._endpoint)
        return sock

    def tick(self, now: float) -> None:
        if self._asked_at is not None and now - self._asked_at > ANSWER_S:
            self.socket.close(0)  # the Lazy Pirate: a new socket, nothing queued on it
            self.socket = self._connect()
            self._asked_at = None
        if self._asked_at is None and now >= self._next:
            with contextlib.suppress(zmq.Again):
                self.socket.send_multipart(mdp.client_request(b"mmi.broker", b""),
                                           zmq.NOBLOCK)
                self._asked_at = now
            self._next = now + ASK_EVERY_S

    def next_deadline(self) -> float | None:
        return self._next if self._asked_at is None else self._asked_at + ANSWER_S

    def drain(self) -> None:
        while True:
            try:
                frames = recv_frames(self.socket)
            except zmq.Again:
                return
            if len(frames) >= 4 and frames[0] == mdp.CLIENT and frames[1] == mdp.C_FINAL:
                self._asked_at = None
                said = broker_said(frames[3:], time.monotonic())
                if said is not None:
                    self.said = said

    def close(self) -> None:
        self.socket.close(0)


class Brokers:
    """A :class:`BrokerWatch` for each door the dispatcher's workers may use
    (``tree_mdp_endpoints``: its tree's, and with a pair on one host the other broker's)."""

    def __init__(self, ctx: zmq.Context[Any], settings: Settings) -> None:
        self.watches = [BrokerWatch(ctx, door) for door in settings.tree_mdp_endpoints]

    def attach(self, loop: PollLoop, then: Callable[[], None] = lambda: None) -> None:
        """Poll the watches in ``loop``; ``then()`` after each answer."""
        def answered(_ready: object) -> None:
            for watch in self.watches:
                watch.drain()
            then()

        loop.watch(lambda: [w.socket for w in self.watches], answered)
        for watch in self.watches:
            loop.add(watch)

    def serve(self, now: float, within_s: float) -> bool | None:
        """role.brokers_serve of their last answers."""
        return brokers_serve([w.said for w in self.watches], now, within_s)

    @property
    def said(self) -> BrokerSaid | None:
        """The answer to tell: of a broker that serves, else of the tree's own."""
        saids = [w.said for w in self.watches]
        return next((s for s in saids if s is not None and s.serves), saids[0])

    def close(self) -> None:
        for watch in self.watches:
            watch.close()


def tell_role(publish: Callable[..., None], role: Role, said: BrokerSaid | None) -> None:
    """``lea:dispatcher_role``: this dispatcher's role, who it is, what its broker said."""
    publish(DISPATCHER_ROLE, role=role.value, pid=os.getpid(), host=socket.gethostname(),
            broker_role=said.role if said else None, broker_state=said.state if said else None)


def wait_to_lead(settings: Settings, db: LeaseDb) -> None:
    """Return once this process holds the leader's lease (``db.fence_token`` set); a standby
    until then. A stop signal meanwhile ends the process (exit 0): nothing was decided."""
    ctx: zmq.Context[Any] = zmq.Context()
    loop = PollLoop("dispatcher")
    brokers = Brokers(ctx, settings)
    bus = Publisher(ctx, settings.bus_in_endpoint, source="dispatcher")
    timers = Timers("dispatcher")
    led = False
    said_standby = False
    held_for = lease.lease_s(settings.heartbeat_expiry_s)

    def standby() -> None:
        nonlocal said_standby
        if not said_standby:
            said_standby = True
            logger.info("dispatcher: standby (another dispatcher leads, or our broker does "
                        "not serve): trying the leader's lease every {}s while our broker "
                        "serves", TRY_EVERY_S)
        tell_role(bus.publish, Role.STANDBY, brokers.said)

    def look(now: float) -> None:
        nonlocal led
        if led:
            return
        if decide(Role.STANDBY, brokers.serve(now, FRESH_S)) is Do.TRY_LOCK:
            led = after_try(lease.take(db, held_for))[1] is Do.LEAD
            if led:
                loop.stop()
            elif not said_standby:
                standby()

    # An answer is looked at when it comes: a lone dispatcher leads at once.
    brokers.attach(loop, lambda: look(time.monotonic()))
    loop.add(timers)
    timers.every(TRY_EVERY_S, look)
    timers.every(ROLE_EVERY_S, lambda _now: standby())
    try:
        with loop.signals():
            loop.run()
    finally:
        brokers.close()
        bus.close()
        ctx.term()
    if not led:
        db.close()
        raise SystemExit(0)
    logger.info("dispatcher: leader: holds the leader's lease (fencing token {}); loading "
                "the replays", db.fence_token)


class Leadership:
    """The leader's side, in the actor's loop: renews the lease and watches our broker; steps
    down when the broker no longer serves or the lease is another's (role.py): the actor
    stops, and its process exits :data:`STEPPED_DOWN_EXIT`."""

    def __init__(self, settings: Settings, actor: Actor, db: LeaseDb) -> None:
        self.brokers = Brokers(actor.ctx, settings)
        self.role = Role.LEADER
        self._actor = actor
        self._db = db
        self._lease_s = lease.lease_s(settings.heartbeat_expiry_s)
        self._silent_s = silent_s(settings)
        self._since = time.monotonic()
        self.brokers.attach(actor.poll_loop)
        actor.every(TRY_EVERY_S, self.check)
        actor.every(lease.RENEW_EVERY_S, self.renew)
        actor.every(ROLE_EVERY_S, lambda _now: self.tell())

    @property
    def stepped_down(self) -> bool:
        return self.role is not Role.LEADER

    def tell(self) -> None:
        tell_role(self._actor.publish, self.role, self.brokers.said)

    def renew(self, _now: float) -> None:
        """Renew the lease; step down if it is no longer ours. Skipped while a turn's
        transaction is open (its fence holds the row; the next renewal comes soon)."""
        if self.stepped_down or self._db.in_transaction:
            return
        if not lease.renew(self._db, self._lease_s):
            self._step_down("the leader's lease is another dispatcher's now")

    def check(self, now: float) -> None:
        """Step down if our broker no longer serves."""
        if self.stepped_down:
            return
        serves = self.brokers.serve(now, self._silent_s)
        if serves is None and now - self._since <= self._silent_s:
            return  # not heard yet since we lead: the silence allowed counts from then
        if decide(Role.LEADER, serves) is Do.STEP_DOWN:
            said = self.brokers.said
            why = ("is silent" if said is None or serves is None
                   else f"says {said.state}, not active")
            self._step_down(f"our broker {why}")

    def _step_down(self, why: str) -> None:
        self.role = Role.STANDBY
        # The process exits: its session ends, which a standby takes for the lease's end.
        logger.warning("dispatcher: stepping down: {}; leaving the lease (exit {})", why,
                       STEPPED_DOWN_EXIT)
        self.tell()
        self._actor.stop()

    def close(self) -> None:
        self.brokers.close()

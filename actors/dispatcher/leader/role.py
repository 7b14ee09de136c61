"""Leader or standby: the role of a dispatcher sharing its PostgreSQL database with others,
as pure data and functions (docs/operations.md, "Several dispatchers").

Nothing here opens a socket, reads a clock or asks the database: the election
(election.py) passes in what its broker last said of itself and when, and what the lock
said, and applies what it gets back. The rules:

- only a dispatcher whose own broker serves competes for the lock (a lone broker, or the
  active one of a pair; with a pair on one host, either door its workers may use): else a
  dispatcher could hold the lock on a server whose broker is passive while the other
  server's broker serves, and nothing would run;
- a standby whose broker serves tries the lock; it leads once it holds it;
- a leader whose broker stops serving (it says so: passive, or a pair still deciding), or
  has been silent for longer than ``silent_s``, steps down: it releases the lock (the
  process exits and comes back as a standby).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """What a dispatcher is now (the ``role`` of ``lea:dispatcher_role``)."""

    STANDBY = "standby"
    LEADER = "leader"


class Do(StrEnum):
    """What the election does next."""

    WAIT = "wait"  # nothing now; look again at the next tick
    TRY_LOCK = "try_lock"  # ask the database for the lease (lease.take)
    LEAD = "lead"  # the lease is ours: load the state, register, serve
    STEP_DOWN = "step_down"  # leave the lease: the process exits and comes back standby


@dataclass(frozen=True, slots=True)
class BrokerSaid:
    """The last answer of our broker to ``mmi.broker``: ``state`` (``active`` serves; a
    broker alone is ``active``), ``role`` (``alone``, ``primary``, ``backup``), ``at`` when
    it came (monotonic seconds)."""

    role: str
    state: str
    at: float

    @property
    def serves(self) -> bool:
        return self.state == "active"


def broker_said(answer: list[bytes], now: float) -> BrokerSaid | None:
    """What an ``mmi.broker`` answer says; None if nothing readable. ``501`` (RFC 8: no such
    MMI service) is a broker from before ``mmi.broker``: alone, so it serves."""
    if answer == [b"501"]:
        return BrokerSaid("alone", "active", now)
    try:
        said = json.loads(answer[0]) if len(answer) == 1 else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(said, dict):
        return None
    role, state = said.get("role"), said.get("state")
    if not isinstance(role, str) or not isinstance(state, str):
        return None
    return BrokerSaid(role[:32], state[:32], now)


def brokers_serve(saids: Iterable[BrokerSaid | None], now: float,
                  silent_s: float) -> bool | None:
    """Whether one of our brokers serves: True if one said so, False if those that spoke
    within ``silent_s`` all said they do not, None if none has said anything for ``silent_s``
    (or ever). Our brokers: the doors the dispatcher's workers may use (its tree's, and with
    a pair on one host the other's, ``LEA_TREE_BACKUP_ENDPOINT``)."""
    fresh = [said for said in saids if said is not None and now - said.at <= silent_s]
    if not fresh:
        return None
    return any(said.serves for said in fresh)


def decide(role: Role, serves: bool | None) -> Do:
    """The next step of a dispatcher in ``role`` whose broker ``serves`` (broker_serves)."""
    if role is Role.STANDBY:
        return Do.TRY_LOCK if serves is True else Do.WAIT
    return Do.WAIT if serves is True else Do.STEP_DOWN


def after_try(got: bool) -> tuple[Role, Do]:
    """The role after a try of the lock: ``got`` it, or another holds it."""
    return (Role.LEADER, Do.LEAD) if got else (Role.STANDBY, Do.WAIT)

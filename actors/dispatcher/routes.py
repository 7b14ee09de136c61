"""Which of the core's methods decides each request the dispatcher serves, and what its
decision does: one table (docs/architecture.md). The process (process.py) serves every row
the same way; the agents' requests, which need more of the request than its body (who sent
it, the agent's process), are served by the process's own ``on_*`` methods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from actors.dispatcher.core import DispatcherCore
from actors.dispatcher.machine.decision import Decision
from messages.base import Message
from messages.dispatch import ListInFlight, OrphanGiveUp, OrphanResend
from messages.queue import AddItems, CreateQueue, GetItem, ItemCommand, ListQueues, ShowQueue
from messages.replay import (
    CancelReplay,
    GetReplayStatus,
    PauseReplay,
    ResumeReplay,
    StartReplay,
)


class Applies(Enum):
    """What the process does with a route's decision."""

    READ = "read"
    """Answered from memory: the reply, nothing to commit."""
    STATE = "state"
    """A change: committed, then its reply sent and its effects performed."""
    ONCE = "once"
    """A control request: a change applied at most once per envelope id (a client's retry,
    or a copy the broker kept while we were down, gets the committed reply again)."""


@dataclass(frozen=True, slots=True)
class Route:
    decide: Callable[[DispatcherCore, Any, float], Decision]
    """A method of the core, called with the request's body and the time."""
    applies: Applies


READ, STATE, ONCE = Applies.READ, Applies.STATE, Applies.ONCE

ROUTES: Final[Mapping[type[Message], Route]] = {
    # People: replays (docs/architecture.md, "Who may do what").
    StartReplay: Route(DispatcherCore.start, ONCE),
    PauseReplay: Route(DispatcherCore.operator_pause, ONCE),
    ResumeReplay: Route(DispatcherCore.resume, ONCE),
    CancelReplay: Route(DispatcherCore.cancel, ONCE),
    GetReplayStatus: Route(DispatcherCore.status, READ),
    # People: work queues (docs/queues.md).
    CreateQueue: Route(DispatcherCore.create_queue, ONCE),
    AddItems: Route(DispatcherCore.add_items, ONCE),
    ItemCommand: Route(DispatcherCore.item_command, ONCE),
    ListQueues: Route(DispatcherCore.list_queues, READ),
    ShowQueue: Route(DispatcherCore.show_queue, READ),
    GetItem: Route(DispatcherCore.get_item, READ),
    # The watchdog.
    ListInFlight: Route(DispatcherCore.inflight, READ),
    OrphanResend: Route(DispatcherCore.orphan_resend, STATE),
    OrphanGiveUp: Route(DispatcherCore.orphan_giveup, STATE),
}

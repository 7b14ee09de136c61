"""Work queue conversation: people and tools ↔ dispatcher (docs/queues.md), and the agent's
word that it is there and which pool it serves.

A queue runs one workflow over many items; each item has a ``reference`` unique within its
queue and the values of the workflow's inputs. The dispatcher keeps queues and items with
its replays, in the same database and the same transactions.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from messages.base import Message
from messages.replay import ByPerson
from messages.workflow import Workflow

ItemStateName = Literal[
    "new",
    "in_progress",
    "done",
    "business_failure",
    "system_failure",
    "needs_person",
    "cancelled",
    "skipped",
    "failed",
]
Priority = Literal["high", "normal", "low"]
QueueCommandName = Literal["retry", "skip", "cancel"]
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_ITEMS_PER_ADD = 100_000


class QueueItemIn(Message):
    """One item as a file gives it (one CSV row or JSON line)."""

    reference: str = Field(min_length=1, max_length=128)
    inputs: dict[str, str] = Field(default_factory=dict, max_length=100)
    priority: Priority = "normal"
    deadline: float | None = None  # epoch seconds
    not_before: float | None = None  # epoch seconds: not taken before


class CreateQueue(ByPerson, type_name="queue.create"):
    name: str = Field(pattern=NAME_PATTERN)
    workflow: Workflow
    pool: str = Field("default", pattern=NAME_PATTERN)
    max_attempts: int = Field(3, ge=1, le=20)
    """Attempts of an item whose system failures came before its first input."""
    operator: str | None = Field(None, max_length=128)


class AddItems(ByPerson, type_name="queue.add"):
    """Items added all or nothing: one refused row refuses the file (docs/queues.md)."""

    queue: str = Field(pattern=NAME_PATTERN)
    items: list[QueueItemIn] = Field(max_length=MAX_ITEMS_PER_ADD)
    operator: str | None = Field(None, max_length=128)


class ListQueues(Message, type_name="queue.list"):
    pass


class ShowQueue(Message, type_name="queue.show"):
    queue: str = Field(max_length=64)
    states: list[ItemStateName] = Field(default_factory=list)
    limit: int = Field(1000, ge=1, le=MAX_ITEMS_PER_ADD)


class GetItem(Message, type_name="queue.item"):
    queue: str = Field(max_length=64)
    reference: str = Field(max_length=128)


class ItemCommand(ByPerson, type_name="queue.command"):
    """retry (a new attempt), skip (handled outside), cancel (stopped, its replay too)."""

    queue: str = Field(max_length=64)
    reference: str = Field(max_length=128)
    command: QueueCommandName
    operator: str = Field(min_length=1, max_length=128)


class QueueReply(Message, type_name="queue.reply"):
    """Queues (with counts by state) and/or items, as plain dicts (docs/queues.md)."""

    queues: list[dict[str, Any]] = Field(default_factory=list)
    items: list[dict[str, Any]] = Field(default_factory=list)
    detail: dict[str, Any] = Field(default_factory=dict)


class AgentAvailable(Message, type_name="agent.available"):
    """An agent's regular word to the dispatcher: alive, and of this pool. An agent not heard
    from for a while is offline: no item goes to it."""

    machine_id: str = Field(min_length=1, max_length=128)
    instance_id: str = Field(max_length=64)
    pool: str = Field("default", pattern=NAME_PATTERN)

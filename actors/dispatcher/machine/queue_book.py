"""Work queues and items in the dispatcher's memory, and the indexes that find the next item
(docs/queues.md).

Choosing the next item of a pool is a heap pop, not a scan: each pool keeps a heap of its
takeable items by :func:`~actors.dispatcher.machine.queue_rules.order_key`, and a heap of items
waiting for their ``not_before``. Entries are dropped lazily: one whose item is no longer
takeable when it comes up is skipped.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from actors.dispatcher.machine.queue_rules import TAKEABLE, order_key
from messages.queue import ItemStateName, Priority
from messages.workflow import Workflow

Key = tuple[str, str]
"""(queue, reference): an item's identity."""


@dataclass(slots=True)
class QueueDef:
    name: str
    workflow: Workflow
    pool: str
    max_attempts: int
    created_at: float


@dataclass(slots=True)
class QueueItem:
    queue: str
    reference: str
    seq: int  # the order items were added in, across queues (age)
    inputs: dict[str, str]
    priority: Priority
    deadline: float | None
    not_before: float | None
    created_at: float
    updated_at: float
    state: ItemStateName = "new"
    attempts: int = 0  # replays started for it
    system_failures: int = 0  # since the last retry by a person
    replay_id: str | None = None  # the current (or last) replay
    machine_id: str | None = None
    reason: str | None = None  # why it is in a failure state
    outputs: dict[str, str] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    at_risk: bool = False
    queued: bool = False  # in a heap (memory only)

    @property
    def key(self) -> Key:
        return (self.queue, self.reference)

    def dump(self) -> dict[str, Any]:
        """What the store keeps and what people are shown."""
        return {
            "queue": self.queue,
            "reference": self.reference,
            "seq": self.seq,
            "inputs": self.inputs,
            "priority": self.priority,
            "deadline": self.deadline,
            "not_before": self.not_before,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "state": self.state,
            "attempts": self.attempts,
            "system_failures": self.system_failures,
            "replay_id": self.replay_id,
            "machine_id": self.machine_id,
            "reason": self.reason,
            "outputs": self.outputs,
            "history": self.history,
            "at_risk": self.at_risk,
        }

    @classmethod
    def load(cls, d: dict[str, Any]) -> QueueItem:
        return cls(**{k: v for k, v in d.items() if k in _FIELDS})


_FIELDS = frozenset(QueueItem.__dataclass_fields__) - {"queued"}


@dataclass(slots=True)
class AgentSeen:
    """An agent as its last ``agent.available`` told (memory only: agents tell it again)."""

    machine_id: str
    pool: str
    instance_id: str
    last_seen: float


@dataclass(slots=True)
class _PoolIndex:
    ready: list[tuple[tuple[int, float, int], Key]] = field(default_factory=list)
    later: list[tuple[float, tuple[int, float, int], Key]] = field(default_factory=list)


class QueueBook:
    """Queues, items and agents; the per-pool heaps of takeable items."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueDef] = {}
        self.items: dict[Key, QueueItem] = {}
        self.by_replay: dict[str, QueueItem] = {}
        self.agents: dict[str, AgentSeen] = {}
        self.next_seq = 1
        self._pools: dict[str, _PoolIndex] = {}
        self._by_queue: dict[str, list[QueueItem]] = {}

    def load(self, queues: list[QueueDef], items: list[QueueItem]) -> None:
        for q in queues:
            self.queues[q.name] = q
        for item in sorted(items, key=lambda i: i.seq):
            self.add(item)
            self.next_seq = max(self.next_seq, item.seq + 1)

    def add(self, item: QueueItem) -> None:
        self.items[item.key] = item
        self._by_queue.setdefault(item.queue, []).append(item)
        if item.replay_id is not None and item.state in ("in_progress", "needs_person"):
            self.by_replay[item.replay_id] = item
        self.offer(item)

    def of_queue(self, name: str) -> list[QueueItem]:
        """The queue's items, oldest first."""
        return self._by_queue.get(name, [])

    def offer(self, item: QueueItem) -> None:
        """Put a takeable item in its pool's heaps (once)."""
        if item.state not in TAKEABLE or item.queued:
            return
        pool = self._pools.setdefault(self.queues[item.queue].pool, _PoolIndex())
        key = order_key(item.priority, item.deadline, item.seq)
        if item.not_before is not None:
            heapq.heappush(pool.later, (item.not_before, key, item.key))
        else:
            heapq.heappush(pool.ready, (key, item.key))
        item.queued = True

    def take(self, pool_name: str, now: float) -> QueueItem | None:
        """The next takeable item of ``pool_name`` at ``now``, out of the heaps."""
        pool = self._pools.get(pool_name)
        if pool is None:
            return None
        while pool.later and pool.later[0][0] <= now:
            _, key, ref = heapq.heappop(pool.later)
            heapq.heappush(pool.ready, (key, ref))
        while pool.ready:
            _, ref = heapq.heappop(pool.ready)
            item = self.items[ref]
            item.queued = False
            if item.state in TAKEABLE:
                return item
        return None

    def waiting(self, pool_name: str) -> int:
        """Heap entries of a pool (an upper bound of its takeable items)."""
        pool = self._pools.get(pool_name)
        return 0 if pool is None else len(pool.ready) + len(pool.later)

    def counts(self, name: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.of_queue(name):
            out[item.state] = out.get(item.state, 0) + 1
        return out

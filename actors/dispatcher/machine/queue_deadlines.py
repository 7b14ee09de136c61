"""Deadlines of work items: which waiting item can no longer start in time (docs/queues.md,
"Deadlines").

An item waits behind the items of its pool that come before it (queue_rules.order_key); the
pool's healthy agents take them a queue's measured duration at a time. Its expected start is
``now + (its rank // agents) * duration``; it is at risk when that start plus one duration
passes its deadline. It is said once (``lea:queue_item_at_risk`` and an audit record) when
it becomes so; the console counts them (``lea_queue_items_at_risk``).

Checked on a timer (the dispatcher's process), not at every decision: the ranks take a sort
of a pool's waiting items, and only pools with a deadline somewhere are looked at.
"""

from __future__ import annotations

from actors.dispatcher.machine.book import Tx
from actors.dispatcher.machine.queue_book import QueueItem
from actors.dispatcher.machine.queue_rules import TAKEABLE, order_key
from messages import events

MEASURED = 20
"""Durations a queue's estimate is the mean of: its most recent done items."""


def duration(item: QueueItem) -> float | None:
    """How long the item's last replay took, from its history (done items only)."""
    if item.state != "done" or len(item.history) < 2:
        return None
    started = next((h["at"] for h in reversed(item.history) if h["state"] == "in_progress"),
                   None)
    return None if started is None else float(item.history[-1]["at"] - started)


def estimates(tx: Tx) -> dict[str, float]:
    """Each queue's mean duration over its last :data:`MEASURED` done items."""
    qb = tx.book.queues
    out: dict[str, float] = {}
    for name in qb.queues:
        seen: list[float] = []
        for item in reversed(qb.of_queue(name)):
            d = duration(item)
            if d is not None:
                seen.append(d)
                if len(seen) == MEASURED:
                    break
        if seen:
            out[name] = sum(seen) / len(seen)
    return out


def check(tx: Tx) -> None:
    """Mark the waiting items that became at risk since the last check."""
    qb = tx.book.queues
    horizon = tx.now - tx.config.agent_seen_s
    agents: dict[str, int] = {}
    for seen in qb.agents.values():
        if seen.last_seen >= horizon:
            agents[seen.pool] = agents.get(seen.pool, 0) + 1
    means = estimates(tx)
    by_pool: dict[str, list[QueueItem]] = {}
    for q in qb.queues.values():
        waiting = [i for i in qb.of_queue(q.name) if i.state in TAKEABLE]
        by_pool.setdefault(q.pool, []).extend(waiting)
    for pool, waiting in by_pool.items():
        if not any(i.deadline is not None and not i.at_risk for i in waiting):
            continue
        waiting.sort(key=lambda i: order_key(i.priority, i.deadline, i.seq))
        n = agents.get(pool, 0)
        for rank, item in enumerate(waiting):
            mean = means.get(item.queue)
            if item.deadline is None or item.at_risk or mean is None:
                continue
            start = tx.now + (rank // n) * mean if n else float("inf")
            if start + mean <= item.deadline:
                continue
            item.at_risk = True
            tx.touch_item(item)
            info = {"queue": item.queue, "reference": item.reference, "pool": pool,
                    "deadline": item.deadline,
                    "expected_start": None if start == float("inf") else start,
                    "agents": n, "mean_duration_s": round(mean, 3)}
            tx.event(events.QUEUE_ITEM_AT_RISK, **info)
            tx.audit("queue_item_at_risk", **info)

"""Work queues in the dispatcher: what people ask of them, what agents say, and how a replay's
fate becomes its item's (docs/queues.md).

Plain functions of the decision's :class:`~actors.dispatcher.machine.book.Tx`, as the other handler
modules. The item's state machine is queue_rules.py; the memory and its indexes are
queue_book.py. Items are written in the same transaction as the replays they start, before
anything leaves (docs/durability.md).
"""

from __future__ import annotations

from typing import Any

from actors.dispatcher.machine import control_inputs, queue_rules
from actors.dispatcher.machine.book import ReplayBook, Tx
from actors.dispatcher.machine.decision import Decision
from actors.dispatcher.machine.queue_book import AgentSeen, QueueBook, QueueDef, QueueItem
from actors.dispatcher.machine.rules import base_id
from actors.dispatcher.machine.state import PAUSED, ReplayState
from messages import events
from messages.control import ErrorReply
from messages.queue import (
    AddItems,
    AgentAvailable,
    CreateQueue,
    GetItem,
    ItemCommand,
    ItemStateName,
    ListQueues,
    QueueReply,
    ShowQueue,
)
from messages.replay import Ack, StartReplay
from messages.workflow import INPUT_TYPES
from workflow.inputs import shown_values, value_problems

MAX_ROWS_REPORTED = 1000
"""Refused rows named in a refusal; the count says how many more."""
QUEUE_OPERATOR = "queue"
"""The ``operator`` of what the dispatcher does to an item's replay by the queue's rules."""


def create(tx: Tx, msg: CreateQueue) -> Decision:
    qb = tx.book.queues
    if msg.name in qb.queues:
        return Decision(
            ErrorReply(
                code="queue_exists", message=f"queue {msg.name} exists", detail={"queue": msg.name}
            )
        )
    q = QueueDef(
        name=msg.name,
        workflow=msg.workflow,
        pool=msg.pool,
        max_attempts=msg.max_attempts,
        created_at=tx.now,
    )
    qb.queues[q.name] = q
    tx.new_queues.append(q)
    info = {
        "queue": q.name,
        "pool": q.pool,
        "workflow_id": q.workflow.workflow_id,
        "max_attempts": q.max_attempts,
        "operator": msg.operator,
        **msg.by(),
    }
    tx.event(events.QUEUE_CREATED, **info)
    tx.audit("queue_created", **info)
    return tx.done(QueueReply(queues=[_queue_view(qb, q, tx.now)]))


def add(tx: Tx, msg: AddItems) -> Decision:
    """All or nothing: one refused row refuses them all, each refused row named."""
    qb = tx.book.queues
    q = qb.queues.get(msg.queue)
    if q is None:
        return Decision(_no_queue(msg.queue))
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for n, it in enumerate(msg.items, start=1):
        problems = value_problems(q.workflow.inputs, it.inputs)
        if it.reference in seen:
            problems.append(f"reference {it.reference!r} already on row {seen[it.reference]}")
        elif (q.name, it.reference) in qb.items:
            state = qb.items[(q.name, it.reference)].state
            problems.append(f"reference {it.reference!r} already in the queue ({state})")
        seen.setdefault(it.reference, n)
        if problems:
            rows.append({"row": n, "reference": it.reference, "problems": problems})
    if not msg.items:
        return Decision(
            ErrorReply(code="no_items", message="no item to add", detail={"queue": q.name})
        )
    if rows:
        return Decision(
            ErrorReply(
                code="items_refused",
                message=(f"{len(rows)} of {len(msg.items)} items refused: none was added"),
                detail={"queue": q.name, "refused": len(rows), "rows": rows[:MAX_ROWS_REPORTED]},
            )
        )
    for it in msg.items:
        item = QueueItem(
            queue=q.name,
            reference=it.reference,
            seq=qb.next_seq,
            inputs=dict(it.inputs),
            priority=it.priority,
            deadline=it.deadline,
            not_before=it.not_before,
            created_at=tx.now,
            updated_at=tx.now,
        )
        qb.next_seq += 1
        qb.add(item)
        tx.new_items.append(item)
    info = {"queue": q.name, "added": len(msg.items), "operator": msg.operator, **msg.by()}
    tx.event(events.QUEUE_ITEMS_ADDED, **info)
    tx.audit(
        "queue_items_added",
        **info,
        references=[it.reference for it in msg.items[:MAX_ROWS_REPORTED]],
    )
    assign(tx)
    return tx.done(QueueReply(detail={"queue": q.name, "added": len(msg.items)}))


def list_queues(book: ReplayBook, _msg: ListQueues, now: float) -> Decision:
    qb = book.queues
    agents = agent_states(book, now)
    return Decision(
        QueueReply(
            queues=[
                _queue_view(qb, q, now) for q in sorted(qb.queues.values(), key=lambda q: q.name)
            ],
            detail={"agents": agents},
        )
    )


def show(book: ReplayBook, msg: ShowQueue, now: float) -> Decision:
    qb = book.queues
    q = qb.queues.get(msg.queue)
    if q is None:
        return Decision(_no_queue(msg.queue))
    wanted = set(msg.states)
    items = [i for i in qb.of_queue(q.name) if not wanted or i.state in wanted]
    return Decision(
        QueueReply(
            queues=[_queue_view(qb, q, now)],
            items=[view(q, i) for i in items[: msg.limit]],
            detail={"matching": len(items)},
        )
    )


def get_item(book: ReplayBook, msg: GetItem) -> Decision:
    qb = book.queues
    q = qb.queues.get(msg.queue)
    item = qb.items.get((msg.queue, msg.reference))
    if q is None or item is None:
        return Decision(_no_item(msg.queue, msg.reference))
    return Decision(QueueReply(items=[view(q, item)]))


def command(tx: Tx, msg: ItemCommand) -> Decision:
    """retry / skip / cancel by a named person; the item's paused or running replay ends."""
    qb = tx.book.queues
    item = qb.items.get((msg.queue, msg.reference))
    if item is None:
        return Decision(_no_item(msg.queue, msg.reference))
    to = queue_rules.command(item.state, msg.command)
    if to is None:
        return Decision(
            ErrorReply(
                code="not_allowed",
                message=(f"{msg.command} does not apply to an item in state {item.state}"),
                detail={"state": item.state, "command": msg.command},
            )
        )
    r = tx.book.replays.get(item.replay_id or "")
    if r is not None and r.active:
        control_inputs.end(
            tx, r, msg.operator, **msg.by(), queue=item.queue, reference=item.reference
        )
    qb.by_replay.pop(item.replay_id or "", None)
    if msg.command == "retry":
        item.system_failures = 0  # a person looked: a fresh budget
    change(tx, item, to, f"{msg.command} by {msg.operator}", operator=msg.operator, **msg.by())
    qb.offer(item)
    assign(tx)
    return tx.done(QueueReply(items=[view(qb.queues[item.queue], item)]))


def available(tx: Tx, msg: AgentAvailable) -> Decision:
    """An agent is alive and serves ``msg.pool``: if it is free, it takes the next item."""
    qb = tx.book.queues
    seen = qb.agents.get(msg.machine_id)
    if seen is None or (seen.pool, seen.instance_id) != (msg.pool, msg.instance_id):
        qb.agents[msg.machine_id] = AgentSeen(msg.machine_id, msg.pool, msg.instance_id, tx.now)
    else:
        seen.last_seen = tx.now
    assign(tx, only=msg.machine_id)
    return tx.done(Ack(status="noted"))


# How a replay's fate becomes its item's --------------------------------------------------


def settle(tx: Tx) -> None:
    """Called with every decision (book.Tx.done): the items whose replay ended, paused or
    resumed in it change state; an agent set free takes the next item."""
    qb = tx.book.queues
    freed = False
    for r in tx.changed:
        item = qb.by_replay.get(r.replay_id)
        if item is None:
            continue
        outputs = _outputs(r)
        if outputs != item.outputs and outputs:
            item.outputs = outputs
            tx.touch_item(item)
        if not r.active:
            qb.by_replay.pop(r.replay_id, None)
            state = queue_rules.on_replay_end(r.status)  # type: ignore[arg-type]
            change(tx, item, state, None if state == "done" else f"replay {r.status}")
            freed = True
        elif r.status == PAUSED and r.pause is not None and item.state == "in_progress":
            q = qb.queues[item.queue]
            verdict = queue_rules.on_pause(
                r.pause.reason, input_started(r), item.system_failures + 1, q.max_attempts
            )
            if verdict is None:
                continue
            reason = r.pause.reason
            if verdict.counts_attempt:
                item.system_failures += 1
            if verdict.end_replay:
                qb.by_replay.pop(r.replay_id, None)
                control_inputs.end(
                    tx, r, QUEUE_OPERATOR, queue=item.queue, reference=item.reference
                )
                freed = True
            change(tx, item, verdict.state, reason)
            qb.offer(item)
        elif r.status == "running" and item.state == "needs_person":
            change(tx, item, queue_rules.on_resume(), None)
    if freed:
        assign(tx)


def _outputs(r: ReplayState) -> dict[str, str]:
    """What the replay's read steps read (docs/queues.md: in ``queue item`` and the export),
    a sensitive value masked; none for a replay whose workflow reads nothing."""
    shown = getattr(r, "shown_outputs", None)
    return {str(k): str(v) for k, v in shown().items()} if callable(shown) else {}


def input_started(r: ReplayState) -> bool:
    """Whether an input of ``r`` may have gone out: an input step was dispatched (in flight,
    answered or given up on). Taken at its worst: a dispatched input may have run."""
    e = r.inflight
    if e is not None and e.action.type in INPUT_TYPES:
        return True
    inputs = {a.action_id for a in r.workflow.actions if a.type in INPUT_TYPES}
    return any(base_id(aid) in inputs for aid in r.resolved)


def change(
    tx: Tx, item: QueueItem, state: ItemStateName, reason: str | None, **detail: object
) -> None:
    """``item`` goes to ``state``: written, announced, recorded."""
    item.state, item.reason = state, reason
    item.history.append(
        {
            "at": tx.now,
            "state": state,
            "reason": reason,
            "replay_id": item.replay_id,
            "machine_id": item.machine_id,
        }
    )
    tx.touch_item(item)
    info = {
        "queue": item.queue,
        "reference": item.reference,
        "state": state,
        "reason": reason,
        "replay_id": item.replay_id,
        "machine_id": item.machine_id,
        "attempts": item.attempts,
        **{k: v for k, v in detail.items() if v is not None},
    }
    tx.event(events.QUEUE_ITEM_CHANGED, **info)
    tx.audit("queue_item_changed", **info)


# Who takes what ----------------------------------------------------------------------------


def assign(tx: Tx, only: str | None = None) -> None:
    """Each free, healthy agent (or ``only`` that one) takes the next item of its pool."""
    qb = tx.book.queues
    if not qb.items:
        return
    busy = _busy_machines(tx.book)
    horizon = tx.now - tx.config.agent_seen_s
    for machine in sorted(qb.agents) if only is None else [only]:
        seen = qb.agents.get(machine)
        if seen is None or seen.last_seen < horizon or machine in busy:
            continue
        item = qb.take(seen.pool, tx.now)
        if item is None:
            continue
        _start(tx, qb, item, machine)


def _start(tx: Tx, qb: QueueBook, item: QueueItem, machine: str) -> None:
    q = qb.queues[item.queue]
    item.attempts += 1
    r = control_inputs.open_replay(
        tx,
        StartReplay(
            workflow=q.workflow, machine_id=machine, inputs=item.inputs, operator=QUEUE_OPERATOR
        ),
        queue=item.queue,
        reference=item.reference,
        attempt=item.attempts,
    )
    if isinstance(r, ErrorReply):  # the queue's workflow or the item's values: for a person
        change(tx, item, "business_failure", r.code, problems=r.detail.get("problems"))
        return
    item.replay_id, item.machine_id = r.replay_id, machine
    qb.by_replay[r.replay_id] = item
    change(tx, item, "in_progress", None)


def _busy_machines(book: ReplayBook) -> set[str]:
    """Machines running or holding a paused replay (a person answers it there)."""
    return {r.machine_id for r in book.replays.values() if r.active}


def agent_states(book: ReplayBook, now: float) -> list[dict[str, Any]]:
    """Each agent heard of: idle, busy, paused (a replay of it waits for a person), offline."""
    qb = book.queues
    running: dict[str, str] = {}
    for r in book.replays.values():
        if r.active:
            running[r.machine_id] = (
                "paused" if r.status == PAUSED or running.get(r.machine_id) == "paused" else "busy"
            )
    out = []
    for m, seen in sorted(qb.agents.items()):
        state = (
            "offline" if seen.last_seen < now - book.config.agent_seen_s else running.get(m, "idle")
        )
        out.append(
            {"machine_id": m, "pool": seen.pool, "state": state, "last_seen": seen.last_seen}
        )
    return out


# Views -------------------------------------------------------------------------------------


def view(q: QueueDef, item: QueueItem) -> dict[str, Any]:
    """An item as people see it: a sensitive input masked."""
    d = item.dump()
    d["inputs"] = shown_values(q.workflow.inputs, item.inputs)
    return d


def _queue_view(qb: QueueBook, q: QueueDef, now: float) -> dict[str, Any]:
    waiting = [i for i in qb.of_queue(q.name) if i.state in queue_rules.TAKEABLE]
    return {
        "name": q.name,
        "pool": q.pool,
        "workflow_id": q.workflow.workflow_id,
        "max_attempts": q.max_attempts,
        "counts": qb.counts(q.name),
        "inputs": [i.model_dump(mode="json") for i in q.workflow.inputs],
        "oldest_waiting_s": max((now - i.created_at for i in waiting), default=0.0),
        "at_risk": sum(1 for i in waiting if i.at_risk),
    }


def _no_item(queue: str, reference: str) -> ErrorReply:
    return ErrorReply(code="not_found", message=f"no item {reference!r} in queue {queue}",
                      detail={"queue": queue, "reference": reference})


def _no_queue(name: str) -> ErrorReply:
    return ErrorReply(code="not_found", message=f"no queue {name}", detail={"queue": name})

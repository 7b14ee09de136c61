"""Work queues in the dispatcher's core and its SQLite store (docs/queues.md): all or nothing
per file, a reference unique whatever its state (in memory and in the table), one item per
free healthy agent of the pool, and items that survive a reopen of the store."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest

from actors.dispatcher.core import DispatcherCore
from actors.dispatcher.machine.decision import SendToAgent
from actors.dispatcher.machine.queue_book import QueueItem
from actors.dispatcher.machine.state import DispatcherConfig
from actors.dispatcher.store.dispatcher_store import DispatcherStore
from messages.control import ErrorReply
from messages.queue import AddItems, AgentAvailable, CreateQueue, QueueItemIn, QueueReply
from messages.workflow import Workflow

WF = Workflow.model_validate({
    "workflow_id": "adm", "inputs": [{"name": "ipp", "pattern": r"\d{6}"}],
    "actions": [{"action_id": "a", "type": "type", "target_spec": {"x_pct": 0.5, "y_pct": 0.5},
                 "parameters": {"text": "{{ipp}}"}}]})


def core() -> DispatcherCore:
    ids = (f"id{n}" for n in itertools.count())
    return DispatcherCore(DispatcherConfig(), lambda: next(ids))


def item(ref: str, ipp: str = "004217") -> QueueItemIn:
    return QueueItemIn(reference=ref, inputs={"ipp": ipp})


def test_a_file_with_a_bad_row_adds_nothing_and_names_each_row() -> None:
    c = core()
    assert isinstance(c.create_queue(CreateQueue(name="q", workflow=WF, pool="ward"),
                                     1.0).reply, QueueReply)
    d = c.add_items(AddItems(queue="q", items=[item("a"), item("b", "12"), item("a"),
                                               item("c")]), 2.0)
    assert isinstance(d.reply, ErrorReply) and d.reply.code == "items_refused"
    assert [r["row"] for r in d.reply.detail["rows"]] == [2, 3]
    assert not d.durable and c.book.queues.items == {}
    assert c.add_items(AddItems(queue="q", items=[item("a")]), 3.0).durable
    again = c.add_items(AddItems(queue="q", items=[item("a")]), 4.0).reply
    assert isinstance(again, ErrorReply) and "already in the queue (new)" in str(again.detail)
    unknown = c.add_items(AddItems(queue="nope", items=[item("z")]), 5.0).reply
    assert isinstance(unknown, ErrorReply) and unknown.code == "not_found"


def test_one_item_per_free_healthy_agent_of_the_pool() -> None:
    c = core()
    c.create_queue(CreateQueue(name="q", workflow=WF, pool="ward"), 1.0)
    c.add_items(AddItems(queue="q", items=[item(f"r{i}") for i in range(3)]), 1.0)
    d = c.agent_available(AgentAvailable(machine_id="m1", instance_id="i", pool="ward"), 2.0)
    sent = [e for e in d.effects if isinstance(e, SendToAgent)]
    assert [e.machine_id for e in sent] == ["m1"] and sent[0].message.action.parameters[
        "text"] == "004217"
    again = c.agent_available(AgentAvailable(machine_id="m1", instance_id="i", pool="ward"),
                              2.5)
    assert not again.durable  # busy: nothing more for it
    other = c.agent_available(AgentAvailable(machine_id="o1", instance_id="i", pool="lab"),
                              2.5)
    assert not other.durable  # not the queue's pool
    c.agent_available(AgentAvailable(machine_id="m2", instance_id="i", pool="ward"), 3.0)
    states = sorted(i.state for i in c.book.queues.items.values())
    assert states == ["in_progress", "in_progress", "new"]



def test_an_agent_not_heard_from_takes_nothing() -> None:
    c = core()
    c.create_queue(CreateQueue(name="q", workflow=WF, pool="ward"), 1.0)
    c.agent_available(AgentAvailable(machine_id="m1", instance_id="i", pool="ward"), 1.0)
    added = c.add_items(AddItems(queue="q", items=[item("r")]), 10.0)  # m1 silent since 1.0
    assert not [e for e in added.effects if isinstance(e, SendToAgent)]
    back = c.agent_available(AgentAvailable(machine_id="m1", instance_id="i", pool="ward"),
                             11.0)
    assert [e.machine_id for e in back.effects if isinstance(e, SendToAgent)] == ["m1"]


def test_items_are_stored_with_the_decision_and_a_reference_is_unique_in_the_table(
        tmp_path: Path) -> None:
    store = DispatcherStore(tmp_path / "d.sqlite3")
    c = core()
    store.commit_decision(c.create_queue(CreateQueue(name="q", workflow=WF), 1.0))
    store.commit_decision(c.add_items(AddItems(queue="q", items=[item("a"), item("b")]), 2.0))
    store.commit_decision(c.agent_available(
        AgentAvailable(machine_id="m1", instance_id="i", pool="default"), 3.0))
    store.close()
    store = DispatcherStore(tmp_path / "d.sqlite3")
    queues, items = store.load_queues()
    assert [q.name for q in queues] == ["q"]
    by_ref = {i.reference: i for i in items}
    assert by_ref["a"].state == "in_progress" and by_ref["a"].replay_id is not None
    assert by_ref["b"].state == "new"
    twin = QueueItem(queue="q", reference="b", seq=99, inputs={}, priority="normal",
                     deadline=None, not_before=None, created_at=0, updated_at=0)
    with pytest.raises(sqlite3.IntegrityError):
        store.stage((), (), new_items=[twin])
    store.close()

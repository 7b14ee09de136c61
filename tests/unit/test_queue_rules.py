"""The work item's state machine and the choice of the next item (queue_rules.py,
queue_book.py; docs/queues.md)."""

from __future__ import annotations

from actors.dispatcher.machine import queue_rules
from actors.dispatcher.machine.queue_book import QueueBook, QueueDef, QueueItem
from messages.workflow import Workflow


def test_business_failures_end_the_replay_and_are_never_retried() -> None:
    for reason in ("target_not_found", "action_failed", "wrong_window"):
        v = queue_rules.on_pause(reason, input_started=True, attempts=1, max_attempts=3)
        assert v is not None and v.state == "business_failure" and v.end_replay
        assert not v.counts_attempt


def test_system_failures_are_retried_before_any_input_then_fail() -> None:
    v = queue_rules.on_pause("orphan_max_resends", False, 1, 3)
    assert v is not None and (v.state, v.end_replay, v.counts_attempt) == (
        "system_failure", True, True)
    last = queue_rules.on_pause("guard_lost", False, 3, 3)
    assert last is not None and last.state == "failed"


def test_after_an_input_a_person_decides() -> None:
    for reason in ("orphan_max_resends", "dead_client", "failed_after_input", "input_unknown",
                   "identity_mismatch"):
        v = queue_rules.on_pause(reason, True, 1, 3)
        assert v is not None and v.state == "needs_person" and not v.end_replay
    for reason in ("input_unknown", "identity_mismatch"):  # whatever came before
        v = queue_rules.on_pause(reason, False, 1, 3)
        assert v is not None and v.state == "needs_person" and not v.end_replay


def test_the_procedures_own_pauses_leave_the_item_in_progress() -> None:
    assert queue_rules.on_pause("user_request", True, 1, 3) is None
    assert queue_rules.on_pause("operator", False, 1, 3) is None


def test_commands() -> None:
    assert queue_rules.command("business_failure", "retry") == "new"
    assert queue_rules.command("done", "retry") is None
    assert queue_rules.command("in_progress", "skip") is None
    assert queue_rules.command("in_progress", "cancel") == "cancelled"
    assert queue_rules.command("needs_person", "skip") == "skipped"


def _book(n: int) -> QueueBook:
    book = QueueBook()
    wf = Workflow.model_validate({"workflow_id": "w", "actions": [
        {"action_id": "a", "type": "wait", "parameters": {"duration_ms": 1}}]})
    book.load([QueueDef("q", wf, "ward", 3, 0.0)], [])
    for i in range(n):
        book.add(QueueItem(queue="q", reference=f"r{i}", seq=i + 1, inputs={},
                           priority="normal", deadline=None, not_before=None,
                           created_at=0.0, updated_at=0.0))
    return book


def test_next_item_by_priority_then_deadline_then_age() -> None:
    book = _book(3)
    book.add(QueueItem(queue="q", reference="late", seq=10, inputs={}, priority="normal",
                       deadline=50.0, not_before=None, created_at=0, updated_at=0))
    book.add(QueueItem(queue="q", reference="urgent", seq=11, inputs={}, priority="high",
                       deadline=None, not_before=None, created_at=0, updated_at=0))
    book.add(QueueItem(queue="q", reference="later", seq=0, inputs={}, priority="high",
                       deadline=None, not_before=100.0, created_at=0, updated_at=0))
    order = []
    while (item := book.take("ward", now=10.0)) is not None:
        item.state = "in_progress"
        order.append(item.reference)
    assert order == ["urgent", "late", "r0", "r1", "r2"]
    taken = book.take("ward", now=100.0)
    assert taken is not None and taken.reference == "later"
    assert book.take("other", now=0.0) is None


def test_an_item_no_longer_takeable_is_skipped() -> None:
    book = _book(2)
    book.items[("q", "r0")].state = "cancelled"
    taken = book.take("ward", 0.0)
    assert taken is not None and taken.reference == "r1"

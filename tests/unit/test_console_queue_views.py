"""What the queues page shows of the dispatcher's answers (console/queue_views.py): a list
row carries no values, an opened item does (masked by the dispatcher), and the commands
offered are those the dispatcher takes in the item's state."""

from __future__ import annotations

from typing import Any

from console.queue_views import agent_row, item_detail, item_row, queue_row, reason_label

ITEM: dict[str, Any] = {
    "queue": "admissions", "reference": "adm-001", "seq": 1,
    "inputs": {"ipp": "004217", "nir": "•••"}, "priority": "high", "deadline": 10.0,
    "not_before": None, "created_at": 1.0, "updated_at": 5.0, "state": "needs_person",
    "attempts": 1, "system_failures": 0, "replay_id": "r1", "machine_id": "w1",
    "reason": "identity_mismatch", "outputs": {"sejour": "2026-004217"},
    "history": [{"at": 2.0, "state": "in_progress", "reason": None, "replay_id": "r1",
                 "machine_id": "w1"},
                {"at": 3.0, "state": "needs_person", "reason": "identity_mismatch",
                 "replay_id": "r1", "machine_id": "w1"}],
    "at_risk": True}


def test_a_list_row_has_no_values_only_the_names_of_those_read() -> None:
    row = item_row(ITEM).model_dump()
    assert "inputs" not in row and "outputs" not in row and "history" not in row
    assert "004217" not in str(row) and "2026-004217" not in str(row)
    assert row["output_names"] == ["sejour"]
    assert row["state_label"] == "Attend une personne"
    assert row["reason_label"] == "patient à vérifier"
    assert row["at_risk"] is True


def test_the_commands_offered_follow_the_dispatchers_rule() -> None:
    assert item_row({**ITEM, "state": "needs_person"}).commands == ["retry", "skip", "cancel"]
    assert item_row({**ITEM, "state": "new"}).commands == ["skip", "cancel"]
    assert item_row({**ITEM, "state": "done"}).commands == []
    assert item_row({**ITEM, "state": "in_progress"}).commands == ["cancel"]


def test_an_opened_item_has_its_values_and_its_history_from_when_it_was_added() -> None:
    detail = item_detail(ITEM)
    assert detail.inputs == {"ipp": "004217", "nir": "•••"}
    assert detail.outputs == {"sejour": "2026-004217"}
    assert [(h.at, h.state) for h in detail.history] == [
        (1.0, "added"), (2.0, "in_progress"), (3.0, "needs_person")]
    assert detail.history[2].machine_id == "w1" and detail.history[2].replay_id == "r1"


def test_reasons_in_a_few_words() -> None:
    assert [reason_label(r) for r in ("skip by dr.martin", "cancel by chef by night",
                                      "replay failed", "output_invalid", "other", None)] == [
        "ignoré par dr.martin", "annulé par chef by night", "replay en échec",
        "valeur illisible à l'écran", "other", None]


def test_bad_fields_do_not_break_the_page() -> None:
    row = item_row({"reference": "x", "state": "strange", "attempts": "2", "deadline": True,
                    "outputs": ["a"], "created_at": None})
    assert (row.state_label, row.attempts, row.deadline, row.output_names) == (
        "strange", 0, None, [])
    assert item_detail({"reference": "x", "history": ["bad", {"state": "done"}]}).history[
        -1].state_label == "Terminé"


def test_a_queue_and_an_agent() -> None:
    q = queue_row({"name": "admissions", "pool": "ward", "workflow_id": "wf",
                   "max_attempts": 3, "counts": {"new": 2, "done": 1},
                   "inputs": [{"name": "ipp"}, {"name": "nir", "sensitive": True}],
                   "oldest_waiting_s": 12.5, "at_risk": 1})
    assert (q.total, q.inputs, q.sensitive, q.oldest_waiting_s) == (
        3, ["ipp", "nir"], ["nir"], 12.5)
    a = agent_row({"machine_id": "w1", "pool": "ward", "state": "offline", "last_seen": 3})
    assert (a.state_label, a.last_seen) == ("hors ligne", 3.0)

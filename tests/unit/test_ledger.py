"""The agent's ledger: durable started marks, finished reports, the outbox, the bound; and the
report rules built on it (re-addressing a re-delivery, the indeterminate report)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.ledger import (
    SCHEMA_VERSION,
    Ledger,
    LedgerConflict,
    LedgerLocked,
    LedgerVersionError,
    decode_report,
)
from agent.reports import (
    ALREADY_EXECUTED,
    INDETERMINATE,
    backoff,
    indeterminate_report,
    readdress,
)
from messages.dispatch import ActionReport, DispatchAction, DispatchMeta
from messages.workflow import Action
from tests.conftest import ROOT


def dispatch(action_id: str = "step_1", attempt_id: str = "att_1",
             type_: str = "click", replay_id: str = "replay_1") -> DispatchAction:
    params = {"duration_ms": 10} if type_ == "wait" else {}
    return DispatchAction(
        replay_id=replay_id, session_id="sess_1", machine_id="M1", attempt_id=attempt_id,
        dispatch_meta=DispatchMeta(first_dispatched_at=time.time()),
        action=Action.model_validate({"action_id": action_id, "type": type_,
                                      "parameters": params}))


def report(d: DispatchAction, success: bool = True, **fields: object) -> ActionReport:
    return ActionReport.model_validate({
        "replay_id": d.replay_id, "session_id": d.session_id, "machine_id": d.machine_id,
        "action_id": d.action.action_id, "attempt_id": d.attempt_id, "success": success,
        **fields})


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.sqlite3")


def test_durability_settings(ledger: Ledger) -> None:
    other = sqlite3.connect(ledger.path)
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()
    assert ledger._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_begin_then_finish_keeps_the_report(ledger: Ledger) -> None:
    d = dispatch()
    assert ledger.lookup("replay_1", "step_1") is None
    ledger.begin(d)
    entry = ledger.lookup("replay_1", "step_1")
    assert entry is not None and entry.state == "started" and not entry.finished
    assert (entry.attempt_id, entry.replay_id, entry.action_type) == ("att_1", "replay_1",
                                                                      "click")
    assert [e.action_id for e in ledger.unfinished()] == ["step_1"]

    sent = report(d, warning="no_screen_change")
    data = ledger.finish("replay_1", "step_1", sent)
    entry = ledger.lookup("replay_1", "step_1")
    assert entry is not None and entry.finished and entry.finished_at is not None
    assert entry.report == data and entry.outbox == data and entry.outbox_attempt == "att_1"
    assert decode_report(data)[1] == sent
    assert ledger.unfinished() == []
    assert [e.action_id for e in ledger.unacked()] == ["step_1"]


def test_one_process_at_a_time(ledger: Ledger) -> None:
    with pytest.raises(LedgerLocked, match="in use by another agent"):
        Ledger(ledger.path)
    ledger.close()
    Ledger(ledger.path).close()


def test_begin_twice_is_a_conflict(ledger: Ledger) -> None:
    ledger.begin(dispatch())
    with pytest.raises(LedgerConflict):
        ledger.begin(dispatch(attempt_id="att_2"))


def test_the_same_action_id_in_two_replays_is_two_entries(ledger: Ledger) -> None:
    # Action ids are stable per workflow step: replaying the workflow again reuses them.
    first, second = dispatch(attempt_id="att_1"), dispatch(attempt_id="att_2",
                                                           replay_id="replay_2")
    ledger.begin(first)
    ledger.finish("replay_1", "step_1", report(first, success=False, error="target_not_found"))
    assert ledger.lookup("replay_2", "step_1") is None  # replay_1's run does not count
    ledger.begin(second)  # no conflict
    assert len(ledger) == 2
    one, two = ledger.lookup("replay_1", "step_1"), ledger.lookup("replay_2", "step_1")
    assert one is not None and two is not None
    assert (one.replay_id, one.attempt_id, one.state) == ("replay_1", "att_1", "finished")
    assert (two.replay_id, two.attempt_id, two.state) == ("replay_2", "att_2", "started")
    assert [(e.replay_id, e.action_id) for e in ledger.unfinished()] == [("replay_2", "step_1")]
    assert [(e.replay_id, e.action_id) for e in ledger.unacked()] == [("replay_1", "step_1")]

    # Finishing, re-queuing and acking one leaves the other alone.
    ledger.finish("replay_2", "step_1", report(second))
    assert ledger.acked("replay_1", "step_1", "att_1")
    assert not ledger.acked("replay_1", "step_1", "att_2")  # att_2 is replay_2's
    one, two = ledger.lookup("replay_1", "step_1"), ledger.lookup("replay_2", "step_1")
    assert one is not None and two is not None
    assert one.outbox is None and two.outbox is not None
    assert decode_report(one.report or b"")[1].error == "target_not_found"
    assert decode_report(two.report or b"")[1].success
    again = readdress(report(second), dispatch(attempt_id="att_3", replay_id="replay_2"))
    ledger.queue_report(again)
    one, two = ledger.lookup("replay_1", "step_1"), ledger.lookup("replay_2", "step_1")
    assert one is not None and two is not None
    assert one.outbox is None and two.outbox_attempt == "att_3"
    # Within one replay the key still holds: a second begin is a conflict.
    with pytest.raises(LedgerConflict, match="replay_2"):
        ledger.begin(dispatch(attempt_id="att_4", replay_id="replay_2"))
    with pytest.raises(KeyError):
        ledger.queue_report(report(dispatch(replay_id="replay_3")))


def test_finish_of_an_unknown_action_raises(ledger: Ledger) -> None:
    with pytest.raises(KeyError):
        ledger.finish("replay_1", "nope", report(dispatch("nope")))
    ledger.begin(dispatch())
    with pytest.raises(KeyError):  # known action id, but of another replay
        ledger.finish("replay_2", "step_1", report(dispatch(replay_id="replay_2")))
    with pytest.raises(ValueError, match="cannot finish"):  # the report of another replay
        ledger.finish("replay_1", "step_1", report(dispatch(replay_id="replay_2")))


def test_ack_empties_the_outbox_only_for_its_attempt(ledger: Ledger) -> None:
    d1 = dispatch()
    ledger.begin(d1)
    first = report(d1)
    ledger.finish("replay_1", "step_1", first)
    again = readdress(first, dispatch(attempt_id="att_2"))
    ledger.queue_report(again)
    # The older attempt's ack: keep sending att_2.
    assert not ledger.acked("replay_1", "step_1", "att_1")
    entry = ledger.lookup("replay_1", "step_1")
    assert entry is not None and entry.outbox is not None
    assert decode_report(entry.outbox)[1] == again
    assert decode_report(entry.report or b"")[1] == first  # the original stays
    assert ledger.acked("replay_1", "step_1", "att_2")
    entry = ledger.lookup("replay_1", "step_1")
    assert entry is not None and entry.outbox is None and entry.acked_at is not None
    assert ledger.unacked() == []
    assert not ledger.acked("replay_1", "step_1", "att_2")  # nothing left to ack


def test_queue_report_needs_a_finished_action(ledger: Ledger) -> None:
    d = dispatch()
    ledger.begin(d)
    with pytest.raises(KeyError):
        ledger.queue_report(report(d))


def test_bounded_to_the_oldest_finished_and_acked(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite3", capacity=256)
    held = dispatch("held_unacked")
    ledger.begin(held)
    ledger.finish("replay_1", "held_unacked", report(held))  # never acked: must survive
    ledger.begin(dispatch("held_started"))  # never finished: must survive
    for i in range(300):
        d = dispatch(f"step_{i}")
        ledger.begin(d)
        ledger.finish("replay_1", d.action.action_id, report(d))
        assert ledger.acked("replay_1", d.action.action_id, d.attempt_id)
    assert len(ledger) == 256
    held_ids = {e.action_id for e in (*ledger.unfinished(), *ledger.unacked())}
    assert held_ids == {"held_unacked", "held_started"}
    for action_id in ("held_unacked", "held_started", "step_46", "step_299"):
        assert ledger.lookup("replay_1", action_id) is not None, action_id
    assert ledger.lookup("replay_1", "step_0") is None
    assert ledger.lookup("replay_1", "step_45") is None


def test_state_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    first = Ledger(path)
    d = dispatch()
    first.begin(d)
    first.finish("replay_1", "step_1", report(d))
    first.begin(dispatch("step_2"))
    first.close()
    second = Ledger(path)
    assert [e.action_id for e in second.unfinished()] == ["step_2"]
    assert [e.action_id for e in second.unacked()] == ["step_1"]


def test_a_ledger_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    Ledger(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()

    # The unversioned format keyed by action_id alone: refused, left untouched.
    old = tmp_path / "old.sqlite3"
    db = sqlite3.connect(old)
    db.execute("CREATE TABLE actions (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
               " action_id TEXT NOT NULL UNIQUE, attempt_id TEXT NOT NULL)")
    db.execute("INSERT INTO actions (action_id, attempt_id) VALUES ('step_1', 'att_1')")
    db.commit()
    db.close()
    with pytest.raises(LedgerVersionError, match=r"unversioned .*version 2 only"):
        Ledger(old)
    db = sqlite3.connect(old)
    assert db.execute("SELECT action_id FROM actions").fetchall() == [("step_1",)]
    db.close()
    with pytest.raises(LedgerVersionError):  # not LedgerLocked: the refusal freed the lock
        Ledger(old)

    # An empty file (created, never written) is a new ledger.
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    ledger = Ledger(empty)
    ledger.begin(dispatch())
    assert len(ledger) == 1
    ledger.close()

    # A newer version too.
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(LedgerVersionError, match=f"a version {SCHEMA_VERSION + 1} ledger"):
        Ledger(path)


def test_started_mark_survives_a_kill_right_after_begin(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    # A process that marks an action started, then dies without closing anything.
    code = (
        "import os, sys\n"
        "from agent.ledger import Ledger\n"
        "from tests.unit.test_ledger import dispatch\n"
        f"Ledger({str(path)!r}).begin(dispatch('step_k'))\n"
        "os._exit(9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60)
    assert proc.returncode == 9
    assert [e.action_id for e in Ledger(path).unfinished()] == ["step_k"]


def test_readdress_keeps_the_outcome_for_the_new_attempt() -> None:
    d1 = dispatch()
    original = report(d1, success=False, error="target_not_found",
                      warning="visual_resolve_failed")
    again = readdress(original, dispatch(attempt_id="att_9"))
    assert again.attempt_id == "att_9" and again.action_id == "step_1"
    assert (again.success, again.error, again.warning) == (False, "target_not_found",
                                                           ALREADY_EXECUTED)
    assert readdress(original, d1) is original  # same attempt: a transport duplicate


def test_indeterminate_report_asks_for_a_person(ledger: Ledger) -> None:
    ledger.begin(dispatch())
    entry = ledger.lookup("replay_1", "step_1")
    assert entry is not None
    r = indeterminate_report(entry)
    assert (r.success, r.error, r.needs_human) == (False, INDETERMINATE, True)
    assert (r.attempt_id, r.replay_id, r.session_id, r.machine_id) == (
        "att_1", "replay_1", "sess_1", "M1")
    # Re-delivered later: still indeterminate, never claimed executed.
    again = readdress(r, dispatch(attempt_id="att_2"))
    assert again.attempt_id == "att_2" and again.warning is None
    assert again.error == INDETERMINATE and again.needs_human


def test_backoff_is_1_3_7_then_7() -> None:
    assert [backoff(i) for i in range(6)] == [1.0, 3.0, 7.0, 7.0, 7.0, 7.0]

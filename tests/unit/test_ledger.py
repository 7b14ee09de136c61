"""The agent's ledger: durable started marks, finished reports, the outbox, the bound; and the
report rules built on it (re-addressing a re-delivery, the indeterminate report)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.protocol.ledger import (
    SCHEMA_VERSION,
    Ledger,
    LedgerConflict,
    LedgerLocked,
    LedgerVersionError,
    decode_report,
    outbox_report,
)
from agent.protocol.outbox import backoff
from agent.protocol.reports import (
    ALREADY_EXECUTED,
    INDETERMINATE,
    indeterminate_report,
    readdress,
)
from messages.dispatch import ActionReport, DispatchAction, DispatchMeta
from messages.workflow import Action
from tests.conftest import ROOT


def dispatch(action_id: str = "step_1", attempt_id: str = "att_1",
             type_: str = "click", replay_id: str = "replay_1",
             supersedes: list[str] | None = None) -> DispatchAction:
    params = {"duration_ms": 10} if type_ == "wait" else {}
    return DispatchAction(
        replay_id=replay_id, session_id="sess_1", machine_id="M1", attempt_id=attempt_id,
        dispatch_meta=DispatchMeta(first_dispatched_at=time.time()),
        action=Action.model_validate({"action_id": action_id, "type": type_,
                                      "parameters": params}),
        supersedes=supersedes or [])


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
    recorded = ledger.finish("replay_1", "step_1", sent)
    data = recorded.data
    entry = ledger.lookup("replay_1", "step_1")
    assert entry is not None and entry.finished and entry.finished_at is not None
    assert entry.report == data and entry.outbox == data and entry.outbox_attempt == "att_1"
    assert decode_report(data) == (recorded.msg_id, sent)
    # After a restart the outbox gives back the very report sent: same bytes, same id.
    assert outbox_report(entry) == recorded
    assert (recorded.replay_id, recorded.action_id, recorded.attempt_id) == (
        "replay_1", "step_1", "att_1")
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
    with pytest.raises(LedgerVersionError, match=r"unversioned .*versions 2 and 3 only"):
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


def test_a_version_2_ledger_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE actions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, replay_id TEXT NOT NULL,
            action_id TEXT NOT NULL, attempt_id TEXT NOT NULL, session_id TEXT NOT NULL,
            machine_id TEXT NOT NULL, action_type TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('started', 'finished')),
            started_at REAL NOT NULL, finished_at REAL, report BLOB, outbox BLOB,
            outbox_attempt TEXT, acked_at REAL, UNIQUE (replay_id, action_id));
        CREATE INDEX actions_state ON actions (state);
        INSERT INTO actions (replay_id, action_id, attempt_id, session_id, machine_id,
            action_type, state, started_at) VALUES
            ('replay_1', 'step_1', 'att_1', 'sess_1', 'M1', 'click', 'started', 1.0);
        PRAGMA user_version = 2;
    """)
    db.close()
    ledger = Ledger(path)
    (entry,) = ledger.unfinished()  # the started mark is kept: it will be reported
    assert (entry.action_id, entry.answered_by) == ("step_1", None)
    ledger.begin(dispatch("step_2", "att_2", supersedes=["step_0"]))
    assert ledger.resolve("replay_1", "step_0") == ledger.lookup("replay_1", "step_2")
    ledger.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    db.close()


# A resume superseding the abandoned ids of its step ------------------------------------------


def test_begin_records_the_superseded_ids_as_aliases_of_the_execution(ledger: Ledger) -> None:
    d = dispatch("s0_resume2", "att_r", supersedes=["s0", "s0_resume", "s0"])
    ledger.begin(d)
    owner = ledger.lookup("replay_1", "s0_resume2")
    assert owner is not None and owner.state == "started" and owner.answered_by is None
    for alias in ("s0", "s0_resume"):
        entry = ledger.lookup("replay_1", alias)
        assert entry is not None and entry.answered_by == "s0_resume2"
        assert entry.report is None and entry.outbox is None
        assert ledger.resolve("replay_1", alias) == owner  # answered by that execution
    assert ledger.resolve("replay_1", "s0_resume2") == owner
    assert ledger.resolve("replay_2", "s0") is None  # another replay's step is its own
    assert len(ledger) == 1  # aliases are not executions
    assert [e.action_id for e in ledger.unfinished()] == ["s0_resume2"]
    # A superseded id is never begun after its resume, nor its alias finished.
    with pytest.raises(LedgerConflict):
        ledger.begin(dispatch("s0", "att_old"))
    with pytest.raises(KeyError, match="alias"):
        ledger.finish("replay_1", "s0", report(dispatch("s0", "att_old")))
    ledger.finish("replay_1", "s0_resume2", report(d))
    owner = ledger.lookup("replay_1", "s0_resume2")
    assert owner is not None and ledger.resolve("replay_1", "s0") == owner


def test_begin_with_a_superseded_id_already_there_records_nothing(ledger: Ledger) -> None:
    ledger.begin(dispatch("s0"))
    with pytest.raises(LedgerConflict, match="s0"):
        ledger.begin(dispatch("s0_resume", "att_r", supersedes=["s0"]))
    assert ledger.lookup("replay_1", "s0_resume") is None  # one transaction: all or nothing


def test_a_stale_copy_of_a_superseded_id_is_answered_through_its_alias(ledger: Ledger) -> None:
    d = dispatch("s0_resume", "att_r", supersedes=["s0"])
    ledger.begin(d)
    done = report(d)
    ledger.finish("replay_1", "s0_resume", done)
    assert ledger.acked("replay_1", "s0_resume", "att_r")
    stale = dispatch("s0", "att_old")
    owner = ledger.resolve("replay_1", "s0")
    assert owner is not None and owner.report is not None
    answer = readdress(decode_report(owner.report)[1], stale)
    assert (answer.action_id, answer.attempt_id, answer.success, answer.warning) == (
        "s0", "att_old", True, ALREADY_EXECUTED)
    ledger.queue_report(answer, answered_by="s0_resume")
    alias = ledger.lookup("replay_1", "s0")
    assert alias is not None and alias.answered_by == "s0_resume"
    assert alias.outbox_attempt == "att_old"
    assert [e.action_id for e in ledger.unacked()] == ["s0"]
    assert ledger.acked("replay_1", "s0", "att_old")
    assert ledger.unacked() == []


def test_a_resume_answered_from_a_superseded_execution_gets_an_alias(ledger: Ledger) -> None:
    # The abandoned s0 ran after all; the resume is answered with its outcome.
    old = dispatch("s0", "att_old")
    ledger.begin(old)
    ledger.finish("replay_1", "s0", report(old, success=False, error="target_not_found"))
    resume = dispatch("s0_resume", "att_r", supersedes=["s0"])
    assert ledger.lookup("replay_1", "s0_resume") is None
    owner = ledger.resolve("replay_1", "s0")
    assert owner is not None and owner.report is not None
    answer = readdress(decode_report(owner.report)[1], resume)
    assert (answer.action_id, answer.error, answer.warning) == (
        "s0_resume", "target_not_found", ALREADY_EXECUTED)
    ledger.queue_report(answer, answered_by="s0")
    # A re-delivery of s0_resume (the dispatcher restarted) now resolves by its own id.
    assert ledger.resolve("replay_1", "s0_resume") == ledger.lookup("replay_1", "s0")
    alias = ledger.lookup("replay_1", "s0_resume")
    assert alias is not None and alias.outbox_attempt == "att_r"
    with pytest.raises(KeyError):  # the alias of an action the ledger does not hold
        ledger.queue_report(readdress(answer, dispatch("s9_resume", "att_9")),
                            answered_by="s9")


def test_aliases_are_evicted_with_their_execution_never_before(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite3", capacity=3)
    first = dispatch("s0_resume", "att_r", supersedes=["s0", "s0_retry1"])
    ledger.begin(first)
    ledger.finish("replay_1", "s0_resume", report(first))
    assert ledger.acked("replay_1", "s0_resume", "att_r")
    stale = readdress(report(first), dispatch("s0", "att_old"))
    ledger.queue_report(stale, answered_by="s0_resume")  # unacked: holds its execution
    for i in range(1, 5):
        d = dispatch(f"s{i}", f"att_{i}")
        ledger.begin(d)
        ledger.finish("replay_1", d.action.action_id, report(d))
        assert ledger.acked("replay_1", d.action.action_id, d.attempt_id)
    assert ledger.resolve("replay_1", "s0") is not None  # kept past the bound
    assert ledger.resolve("replay_1", "s0_retry1") is not None
    assert len(ledger) == 3  # the bound, kept by evicting s1 and s2 instead
    assert ledger.lookup("replay_1", "s1") is None
    assert ledger.acked("replay_1", "s0", "att_old")
    d = dispatch("s5", "att_5")
    ledger.begin(d)
    for gone in ("s0_resume", "s0", "s0_retry1", "s1", "s2"):
        assert ledger.lookup("replay_1", gone) is None, gone
    assert [r[0] for r in ledger._db.execute(
        "SELECT action_id FROM actions ORDER BY seq")] == ["s3", "s4", "s5"]


def test_started_mark_survives_a_kill_right_after_begin(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    # A process that marks an action started, then dies without closing anything.
    code = (
        "import os, sys\n"
        "from agent.protocol.ledger import Ledger\n"
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


def test_readdress_to_another_id_of_the_step() -> None:
    d = dispatch("s0_resume", "att_r")
    done = report(d, success=True)
    stale = readdress(done, dispatch("s0", "att_r"))  # same attempt id, another action
    assert (stale.action_id, stale.attempt_id, stale.warning) == (
        "s0", "att_r", ALREADY_EXECUTED)
    assert readdress(done, d) is done


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


def test_forget_unfinished_removes_a_started_row_only(ledger: Ledger) -> None:
    """A wait cut by a restart is forgotten so that its next dispatch runs it; a
    finished row is never forgotten (it would then run twice)."""
    cut, done = dispatch("w1", type_="wait"), dispatch("w2", type_="wait")
    ledger.begin(cut)
    ledger.begin(done)
    ledger.finish("replay_1", "w2", report(done))
    assert ledger.forget_unfinished("replay_1", "w1")
    assert ledger.lookup("replay_1", "w1") is None and ledger.unfinished() == []
    assert not ledger.forget_unfinished("replay_1", "w2")
    assert ledger.lookup("replay_1", "w2") is not None
    ledger.begin(dispatch("w1", "att_2", type_="wait"))  # runs again

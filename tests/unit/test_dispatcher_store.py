"""The dispatcher's SQLite store: round trip, one-transaction commits, outbox, reports log."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgpack
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from actors.dispatcher.machine.decision import (
    AuditRecord,
    Consult,
    Effect,
    Notify,
    PublishEvent,
    RecordReport,
    SendToAgent,
    TrackInFlight,
    UntrackInFlight,
    effect_from_dict,
    effect_to_dict,
)
from actors.dispatcher.machine.state import DispatcherState, mutable_dump
from actors.dispatcher.store.db import StoreUnavailable
from actors.dispatcher.store.dispatcher_store import DB_NAME, OUTBOX_EFFECTS, DispatcherStore
from actors.dispatcher.store.postgres import PgDb
from messages.loop import ForgetReplay
from messages.pause import AgentPaused
from messages.workflow import Action
from tests.unit.dispatcher_db import Reopen, open_at
from tests.unit.test_dispatcher_core import CHECKS, H, act, of, sent, wf

ROOT = Path(__file__).resolve().parents[2]


def persist(h: H, store: DispatcherStore) -> list[tuple[int, Effect]]:
    rows: list[tuple[int, Effect]] = []
    for d in h.decisions:
        rows += store.commit_decision(d)
    h.decisions.clear()
    return rows


def snapshot(state: DispatcherState) -> dict[str, Any]:
    return {rid: (r.summary(), mutable_dump(r), dict(r.resolved), r.workflow, r.seq,
                  r.operator, r.created_at)
            for rid, r in state.replays.items()}


def varied(h: H) -> dict[str, str]:
    """Replays in every state: in flight after a retry, paused with checks, waiting, done."""
    retrying, _ = h.start(wf("s1", "s2"), session="A")
    h.report(retrying, success=False, error="target_not_found")
    h.resend(retrying)
    waiting, _ = h.start(wf("w1"), session="A")
    paused, _ = h.start(wf("p1", act("p", "pause_for_human", safety_checks=CHECKS)), machine="m2")
    h.report(paused, warning="already_executed")
    failed, _ = h.start(wf("f1", "f2"), machine="m3")
    h.report(failed, success=False, error="system_dialog:uac_consent")
    cancelled, _ = h.start(wf("c1"), session="C")
    h.cancel(cancelled)
    done, _ = h.start(wf("d1"), session="D")
    h.report(done)
    return {"retrying": retrying, "waiting": waiting, "paused": paused, "failed": failed,
            "cancelled": cancelled, "done": done}


def test_round_trip_restores_every_replay(reopen: Reopen) -> None:
    h = H()
    store = reopen()
    ids = varied(h)
    persist(h, store)
    store.close()
    loaded = reopen().load()
    assert snapshot(loaded) == snapshot(h.core.state)
    assert loaded.next_seq == h.core.state.next_seq
    assert loaded.replays[ids["paused"]].pause is not None
    failed = loaded.replays[ids["failed"]].pause
    assert failed is not None and failed.failed_action is not None
    assert failed.failed_action.action_id == "f1"


def test_a_reloaded_core_carries_on(reopen: Reopen) -> None:
    h = H()
    store = reopen()
    ids = varied(h)
    persist(h, store)
    h2 = H(state=reopen().load(), first_id=h.n, now=h.now)
    h2.core.check_invariants()
    assert [m.action.action_id for m in sent(h2.report(ids["retrying"]))] == ["s2"]
    assert [m.action.action_id for m in sent(h2.resume(ids["failed"]))] == ["f1_resume"]


def test_a_stored_replay_the_rules_now_refuse_is_left_in_the_store(tmp_path: Path) -> None:
    """An older version stored a workflow today's rules refuse (a monitor index no
    workstation has): the dispatcher starts without it instead of crash-looping, and the
    row stays for a person."""
    h = H()
    path = tmp_path / DB_NAME
    store = DispatcherStore(path)
    bad, _ = h.start(wf("s1"), machine="m1")
    good, _ = h.start(wf("t1"), machine="m2")
    persist(h, store)
    store.close()
    db = sqlite3.connect(path)
    (blob,) = db.execute("SELECT workflow FROM replays WHERE replay_id = ?", (bad,)).fetchone()
    workflow = msgpack.unpackb(blob)
    workflow["actions"][0]["monitor_index"] = 99
    db.execute("UPDATE replays SET workflow = ? WHERE replay_id = ?",
               (msgpack.packb(workflow), bad))
    db.commit()
    db.close()
    loaded = DispatcherStore(path).load()
    assert set(loaded.replays) == {good}
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM replays WHERE replay_id = ?", (bad,)).fetchone() \
        == (1,)
    db.close()


def test_commit_is_all_or_nothing(reopen: Reopen) -> None:
    h = H()
    store = reopen()
    rid, d = h.start(wf("s1"))
    with pytest.raises(TypeError):
        store.commit([h.replay(rid)], [*d.effects, "not an effect"])  # type: ignore[list-item]
    assert store.load().replays == {} and store.pending_outbox() == []
    store.commit_decision(d)  # the head is written in full on the retry
    assert list(reopen().load().replays) == [rid]


def test_outbox_rows_are_returned_pending_then_forgotten(reopen: Reopen) -> None:
    h = H()
    store = reopen()
    _, d = h.start(wf("s1"))
    rows = store.commit_decision(d)
    assert [e for _, e in rows] == [e for e in d.effects if isinstance(e, OUTBOX_EFFECTS)]
    assert len(rows) >= 2  # the replay's start and its first dispatch, for the audit trail
    assert [i for i, _ in rows] == sorted(i for i, _ in rows)
    assert store.pending_outbox() == rows
    assert store.pending_outbox(limit=2) == rows[:2]
    store.mark_sent([i for i, _ in rows[:2]])
    assert store.pending_outbox() == rows[2:]
    store.mark_sent([i for i, _ in rows])
    store.mark_sent([])
    assert store.pending_outbox() == []
    store.close()
    # Ids are never reused (receivers dedupe on them), even after the outbox emptied.
    store = reopen()
    _, d2 = h.start(wf("s2"))
    again = store.commit_decision(d2)
    assert min(i for i, _ in again) > max(i for i, _ in rows)


def test_acked_outbox_rows_go_with_the_next_turn(reopen: Reopen) -> None:
    """``sent``: the rows the audit trail acknowledged are deleted in the next decision's
    transaction, all of them, and only them."""
    h = H()
    store = reopen()
    rid, d = h.start(wf("s1", "s2", "s3"))
    rows = store.commit_decision(d) + store.commit_decision(h.report(rid))
    assert len(rows) > 2
    acked = [i for i, _ in rows[:-1]]
    report = store.commit_decision(h.report(rid), sent=acked)
    assert store.pending_outbox() == [rows[-1], *report]
    store.close()


@pytest.mark.parametrize("fresh_rows", [10_000, 3])
def test_the_audit_senders_view_is_the_databases(reopen: Reopen, fresh_rows: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows committed by this process are given to the audit sender from memory
    (``upto`` the durable id): the same rows, in the same order, as the database holds,
    acknowledged rows gone; beyond ``FRESH_ROWS`` kept, read from the database until the
    sender has caught up."""
    monkeypatch.setattr("actors.dispatcher.store.fresh_rows.FRESH_ROWS", fresh_rows)
    h = H()
    store = reopen()
    disk = reopen()  # reads from the database: it commits nothing, so has nothing in memory
    rid, d = h.start(wf(*(f"s{i}" for i in range(12))))
    rows = store.commit_decision(d)
    cursor = rows[0][0] - 1  # the sender's: every row up to it is acknowledged
    seen = 0
    for n in range(10):
        acked = [i for i, _ in rows if i <= cursor]
        rows = [r for r in rows if r[0] > cursor]
        rows += store.commit_decision(h.report(rid), sent=acked)
        upto = store.durable_outbox_id
        batch = store.pending_outbox(n % 3 + 1, cursor, upto)
        assert batch == disk.pending_outbox(n % 3 + 1, cursor, upto), n
        assert batch == rows[:n % 3 + 1]
        cursor, seen = (batch[-1][0] if batch else cursor), seen + len(batch)
    assert seen >= 10
    disk.close()
    store.close()


def test_reports_log_records_every_report_with_its_status(reopen: Reopen) -> None:
    h = H()
    store = reopen()
    rid, _ = h.start(wf("s1", "s2"))
    old = h.report_msg(rid, screenshot_after=b"\x89PNG-old")
    h.resend(rid)
    h.send_report(old)  # stale
    fresh = h.report_msg(rid, screenshot_after=b"\x89PNG")
    h.send_report(fresh)  # accepted
    h.send_report(fresh)  # duplicate
    h.report(rid, sender="m9")  # refused
    h.report(rid, action_id="precheck_wait_1", attempt="x")  # unknown
    rows = persist(h, store)
    assert not any(isinstance(e, RecordReport) for _, e in rows)  # local, not in the outbox
    log = store.reports(rid)
    assert [(r["action_id"], r["status"]) for r in log] == [
        ("s1", "stale"), ("s1", "accepted"), ("s1", "duplicate"), ("s2", "refused"),
        ("precheck_wait_1", "unknown")]
    assert log[3]["sender_machine"] == "m9"
    assert log[1]["body"]["screenshot_after"] == {
        "sha256": hashlib.sha256(b"\x89PNG").hexdigest(), "bytes": 4}  # bytes: audit trail
    assert log[1]["success"] is True and store.reports("other") == []


def test_every_effect_survives_msgpack(tmp_path: Path) -> None:
    h = H()
    rid, d = h.start(wf("s1", act("t", "type")))
    report = h.report_msg(rid, screenshot_before=b"\x00\xff", actual_position={"x_pct": 0.5})
    effects: list[Effect] = [
        *d.effects, UntrackInFlight("s1", "a1"),
        Notify("agent.m1", AgentPaused(replay_id=rid, message="Pause")),
        Consult("loop_detector", rid, "t1", ForgetReplay(replay_id=rid), 2.0),
        AuditRecord("report_received", {"report": report.model_dump(), "at": 1.5}),
        RecordReport(report, "accepted", "m1", 2.0)]
    assert {type(e) for e in effects} >= {SendToAgent, TrackInFlight, PublishEvent}
    for effect in effects:
        packed = msgpack.packb(effect_to_dict(effect), use_bin_type=True)
        assert effect_from_dict(msgpack.unpackb(packed, raw=False)) == effect
    with pytest.raises(ValueError):
        effect_from_dict({"kind": "nope"})


def test_workflow_is_written_once_and_transitions_stay_small(reopen: Reopen) -> None:
    anchor = "A" * 20_000  # a big anchor image per step
    steps = [Action.model_validate({**act(f"s{i}").model_dump(),
                                    "target_spec": {"anchor_image_base64": anchor}})
             for i in range(50)]
    h = H()
    store = reopen()
    rid, _ = h.start(wf(*steps))
    persist(h, store)
    statements: list[str] = []
    db = store._db
    execute, executemany = db.execute, db.executemany
    db.execute = lambda sql, *a: (statements.append(sql), execute(sql, *a))[1]  # type: ignore[method-assign]
    db.executemany = lambda sql, *a: (statements.append(sql), executemany(sql, *a))[1]  # type: ignore[method-assign]
    for _ in range(10):
        h.report(rid)
    persist(h, store)
    db.execute, db.executemany = execute, executemany  # type: ignore[method-assign]
    assert not any(s.lstrip().upper().startswith("INSERT INTO REPLAYS") for s in statements)
    (state_bytes, workflow_bytes) = store._db.execute(
        "SELECT length(state), length(workflow) FROM replays").fetchone()
    assert workflow_bytes > 50 * 20_000 and state_bytes < 25_000  # one in-flight step at most
    assert tuple(store._db.execute("SELECT count(*) FROM resolved").fetchone()) == (10,)


def test_resolved_rows_are_appended_once_across_reloads(reopen: Reopen) -> None:
    h = H()
    store = reopen()
    rid, _ = h.start(wf("s1", "s2", "s3"))
    h.report(rid)
    persist(h, store)
    store.close()
    store = reopen()
    h2 = H(state=store.load(), first_id=h.n, now=h.now)
    h2.report(rid)
    h2.report(rid)
    persist(h2, store)
    rows = store._db.execute("SELECT action_id, outcome FROM resolved ORDER BY rowid").fetchall()
    assert [tuple(r) for r in rows] == [("s1", "acked"), ("s2", "acked"), ("s3", "acked")]


def test_load_keeps_unfinished_and_the_most_recent_finished(reopen: Reopen) -> None:
    h = H()
    store = reopen(keep_finished=2)
    finished = []
    for i in range(4):
        rid, _ = h.start(wf(f"s{i}"))
        h.report(rid)
        finished.append(rid)
    running, _ = h.start(wf("r1"))
    persist(h, store)
    state = store.load()
    assert list(state.replays) == [*finished[2:], running]
    assert state.next_seq == 6


def test_wal_and_synchronous_full(tmp_path: Path) -> None:
    store = DispatcherStore(tmp_path / "d.sqlite3")
    assert store._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert store._db.execute("PRAGMA synchronous").fetchone() == (2,)


def test_postgresql_commits_synchronously_whatever_the_server_default(pg_url: str) -> None:
    """synchronous_commit off on the database: the store's session sets it on again, so a
    COMMIT returns only once its WAL is flushed (a decision durable before its effects)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {conninfo_to_dict(pg_url)['dbname']} "
                     "SET synchronous_commit = off".encode())
    store = DispatcherStore(PgDb.connect(pg_url))
    assert store._db.execute("SHOW synchronous_commit").fetchone() == ("on",)
    with psycopg.connect(pg_url) as other:
        assert other.execute("SHOW synchronous_commit").fetchone() == ("off",)
    store.close()


def test_postgresql_refuses_a_commit_the_server_rolled_back(pg_url: str) -> None:
    """A failed statement leaves the transaction aborted; PostgreSQL answers its COMMIT with
    ROLLBACK and no error: the store raises, or it would send the turn's effects. The turn's
    statements are pipelined: the error comes with the commit, the server's own; a statement
    whose result was read at once (its error raised there) leaves COMMIT answered ROLLBACK."""
    db = PgDb.connect(pg_url)
    db.begin()
    db.execute("INSERT INTO no_such_table VALUES (1)")
    with pytest.raises(psycopg.errors.UndefinedTable):
        db.commit()
    db.rollback()
    assert not db.in_transaction
    db.begin()
    with pytest.raises(psycopg.errors.UndefinedTable):
        db.execute("SELECT * FROM no_such_table").fetchone()
    with pytest.raises((RuntimeError, psycopg.Error)):
        db.commit()
    db.rollback()
    assert not db.in_transaction
    assert db.execute("SELECT 1").fetchone() == (1,)
    db.close()


def test_postgresql_unreachable_is_said_clearly_without_the_password() -> None:
    from tests.conftest import free_port

    url = f"postgresql://lea:s3cret@127.0.0.1:{free_port()}/lea"
    with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1:\d+/lea is unreachable") as info:
        PgDb.connect(url, wait_s=0.5)
    assert "s3cret" not in str(info.value)


def test_in_dir_creates_the_database_under_the_data_dir(tmp_path: Path) -> None:
    store = DispatcherStore.in_dir(tmp_path / "var")
    assert store.path == tmp_path / "var" / DB_NAME and store.path.exists()


def test_state_survives_kill_9_right_after_commit(reopen: Reopen) -> None:
    """A committed transition is on disk even if the process dies without closing anything."""
    script = textwrap.dedent(f"""
        import os, signal
        from tests.unit.test_dispatcher_core import H, wf
        from tests.unit.dispatcher_db import open_at
        store = open_at({reopen.where!r})
        h = H()
        rid, d = h.start(wf("s1", "s2"))
        store.commit_decision(d)
        print(rid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    rid = proc.stdout.decode().strip()
    store = reopen()
    state = store.load()
    r = state.replays[rid]
    assert r.inflight is not None and r.inflight.action.action_id == "s1"
    # The dispatch itself is not in the outbox: recovery re-sends what is in flight.
    assert [type(e) for _, e in store.pending_outbox()].count(SendToAgent) == 0
    h = H(state=state, first_id=100)
    d = h.do(h.core.recover(h.now))
    assert [m.dispatch_meta.resend_reason for m in sent(d)] == ["dispatcher_restarted"]
    assert of(d, UntrackInFlight)


def test_a_foreign_writer_cannot_half_apply(tmp_path: Path) -> None:
    """BEGIN IMMEDIATE takes the write lock up front: a concurrent writer waits, never mixes."""
    store = DispatcherStore(tmp_path / "d.sqlite3")
    other = sqlite3.connect(tmp_path / "d.sqlite3", isolation_level=None, timeout=0.05)
    other.execute("BEGIN IMMEDIATE")
    h = H()
    _, d = h.start(wf("s1"))
    store._db.execute("PRAGMA busy_timeout=50")
    with pytest.raises(sqlite3.OperationalError):
        store.commit_decision(d)
    other.execute("ROLLBACK")
    assert store.pending_outbox() == []
    assert store.commit_decision(d)


def test_a_control_request_is_recorded_with_its_decision(reopen: Reopen, monkeypatch:
                                                         pytest.MonkeyPatch) -> None:
    h = H()
    store = reopen()
    rid, d = h.start(wf("s1"))
    assert store.reply_for("req1", "StartReplay") is None
    store.commit_decision(d, ("req1", "StartReplay", b"reply-1"))
    assert store.reply_for("req1", "StartReplay") == b"reply-1"
    assert store.reply_for("req1", "ResumeReplay") is None  # an id is per kind of request
    store.close()
    # In the same transaction as the decision: both survive a restart, or neither does.
    store = reopen()
    assert list(store.load().replays) == [rid]
    assert store.reply_for("req1", "StartReplay") == b"reply-1"
    _, d2 = h.start(wf("s2"))
    # A record never overwrites another.
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
        store.commit_decision(d2, ("req1", "StartReplay", b"reply-2"))
    assert list(store.load().replays) == [rid]
    # Bounded: the oldest records go.
    monkeypatch.setattr("actors.dispatcher.store.dispatcher_store.KEEP_REQUESTS", 2)
    for i in range(2, 5):
        store.commit([], [], (f"req{i}", "StartReplay", b"r"))
    assert [store.reply_for(f"req{i}", "StartReplay") is not None for i in range(1, 5)] == [
        False, False, True, True]


def test_postgresql_connection_lost_mid_turn_is_reported_and_nothing_of_it_is_kept(
        pg_url: str) -> None:
    """The server ends the connection while a turn is staged: the commit raises, the owner
    is told (the dispatcher stops on it: process.py), and the turn is not in the database."""
    lost: list[BaseException] = []
    store = DispatcherStore(PgDb.connect(pg_url, on_lost=lost.append))
    h = H()
    kept, first = h.start(wf("s1"))
    store.commit_decision(first)
    _, second = h.start(wf("s2"))
    store.commit_decision(second, harden=False)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    with pytest.raises(psycopg.OperationalError):
        store.harden()
    assert len(lost) == 1 and store.staged == 0
    assert list(open_at(pg_url).load().replays) == [kept]


def test_postgresql_without_the_right_to_create_the_tables_is_said(pg_url: str) -> None:
    role = f"reader_{conninfo_to_dict(pg_url)['dbname']}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN".encode())
    with pytest.raises(StoreUnavailable, match="cannot set up the dispatcher's tables"):
        PgDb.connect(pg_url.replace("lea@", f"{role}@"))

"""The dispatcher's group commit: a turn's decisions staged in one transaction and committed
with one fsync before anything of them goes out; outbox ids never given twice; the WAL
checkpointed off the loop; watchdog updates sent in batches."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from actors.dispatcher.audit_records import outbox_records
from actors.dispatcher.machine.decision import AuditRecord, TrackInFlight, UntrackInFlight
from actors.dispatcher.machine.state import DispatcherConfig
from actors.dispatcher.process import DispatcherActor
from actors.dispatcher.store.dispatcher_store import DB_NAME, DispatcherStore
from actors.dispatcher.store.sqlite import SqliteDb
from actors.watchdog.process import WatchdogActor
from messages.base import Message
from messages.codec import decode, encode
from messages.dispatch import (
    ActionReport,
    ClaimAttempt,
    ClaimReply,
    InFlight,
    Track,
    TrackBatch,
    Untrack,
)
from messages.replay import (
    Ack,
    GetReplayStatus,
    ReplayStarted,
    ReplayStatusReply,
    StartReplay,
)
from runtime.settings import Settings
from tests.conftest import free_port, wait_until
from tests.unit.dispatcher_db import Reopen
from tests.unit.test_dispatcher_core import H, wf
from tests.unit.test_dispatcher_process import dispatcher as process_dispatcher
from transport.peer_id import TREE_USER_ID, client_address
from transport.worker import Request


def _steps(n: int) -> list[str]:
    return [f"s{i}" for i in range(n)]


def _report(store: DispatcherStore, h: H, rid: str, harden: bool = True) -> None:
    store.commit_decision(h.report(rid), harden=harden)


def test_a_turn_is_one_transaction_and_harden_commits_it(reopen: Reopen) -> None:
    store = reopen(sync_interval_s=3600)  # no checkpoint meanwhile
    h = H()
    rid, start = h.start(wf(*_steps(10)), mode="autonomous")
    store.commit_decision(start)
    before = store.durable_outbox_id
    for i in range(4):
        _report(store, h, rid, harden=False)
        assert store.staged == i + 1
    resolved = "SELECT count(*) FROM resolved WHERE replay_id = ?"
    assert reopen.count(resolved, rid) == 0  # nothing of the turn is committed yet...
    assert store.durable_outbox_id == before  # ...nor may its audit records be sent
    assert max(i for i, _ in store.pending_outbox()) > before
    store.harden()  # one COMMIT, one fsync, for the four
    assert store.staged == 0 and reopen.count(resolved, rid) == 4
    assert store.durable_outbox_id == max(i for i, _ in store.pending_outbox())
    store.close()


def test_a_turn_not_hardened_is_lost_and_its_outbox_ids_are_never_given_again(
        reopen: Reopen) -> None:
    """What a cut does: the turn's transaction never reached the disk. The ids its rows had
    are not handed out again (SQLite: a new epoch at each open; PostgreSQL: a sequence), so
    no record id names two records."""
    store = reopen()
    h = H()
    rid, start = h.start(wf(*_steps(10)), mode="autonomous")
    kept = [i for i, _ in store.commit_decision(start)]
    lost = [i for i, _ in store.commit_decision(h.report(rid),
                                                harden=False)]
    assert lost and min(lost) > max(kept)
    store.close()  # the open turn is rolled back, as after a crash
    again = reopen()
    if isinstance(store._db, SqliteDb):
        assert again._db.epoch == store._db.epoch + 1  # type: ignore[attr-defined]
    assert [i for i, _ in again.pending_outbox()] == kept
    h2 = H()
    _rid2, start2 = h2.start(wf("t1"), mode="autonomous")
    fresh = [i for i, _ in again.commit_decision(start2)]
    assert min(fresh) > max(lost)
    again.close()


def test_the_syncer_checkpoints_commits_into_the_database_file(tmp_path: Path) -> None:
    path = tmp_path / DB_NAME
    store = DispatcherStore(path, sync_interval_s=0.01)
    h = H()
    rid, start = h.start(wf(*_steps(10)), mode="autonomous")
    store.commit_decision(start)
    for _ in range(4):
        _report(store, h, rid)
    assert isinstance(store._db, SqliteDb)
    syncer = store._db.syncer
    wait_until(lambda: syncer.behind() == 0, timeout=10)
    # Checkpointed: the database file alone, without its WAL, already holds the 4 steps.
    alone = tmp_path / "alone.sqlite3"
    shutil.copyfile(path, alone)
    db = sqlite3.connect(alone)
    assert db.execute("SELECT count(*) FROM resolved WHERE replay_id = ?",
                      (rid,)).fetchone() == (4,)
    db.close()
    store.close()


def test_performed_rows_are_deleted_by_the_next_commit(reopen: Reopen) -> None:
    store = reopen()
    h = H()
    rid, start = h.start(wf("s1", "s2"), mode="autonomous")
    first = store.commit_decision(start)
    second = store.commit_decision(h.report(rid),
                                   sent=[i for i, _ in first])
    assert [i for i, _ in store.pending_outbox()] == [i for i, _ in second]
    store.close()


# The actors in-process, without a broker: requests handed to ``serve`` ------------------

@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    port = free_port()  # nothing listens: sockets connect and queue, nothing is delivered
    return Settings(mdp_endpoint=f"tcp://127.0.0.1:{port}",
                    bus_in_endpoint=f"tcp://127.0.0.1:{port}", data_dir=tmp_path / "var")


def serve(actor: DispatcherActor | WatchdogActor, message: Message) -> Message:
    request = Request(client=client_address(b"c", TREE_USER_ID), body=[encode(message)])
    return decode(actor.serve(request)).body


@contextmanager
def dispatcher(settings: Settings) -> Iterator[DispatcherActor]:
    with process_dispatcher(settings, DispatcherConfig()) as a:  # no consultations
        yield a


def _report_of(actor: DispatcherActor, rid: str) -> ActionReport:
    r = actor.core.replays[rid]
    assert r.inflight is not None
    return ActionReport(replay_id=rid, session_id=r.session_id, machine_id=r.machine_id,
                        action_id=r.inflight.action.action_id,
                        attempt_id=r.inflight.attempt_id, success=True)


def test_in_a_turn_nothing_goes_out_before_the_group_commit(settings: Settings) -> None:
    """Under run(): replies wait in the base loop, dispatches and audit records here, until
    end_turn has committed the turn (one fsync for every decision of it)."""
    with dispatcher(settings) as actor:
        started = serve(actor, StartReplay(workflow=wf("s1", "s2", "s3"), machine_id="m1",
                                           mode="autonomous"))
        assert isinstance(started, ReplayStarted) and actor.store.staged == 0
        rid = started.replay_id
        actor.end_turn()
        sent = actor.client.outstanding  # the first dispatch
        actor._grouped = True
        serve(actor, _report_of(actor, rid))  # s1 done, s2 dispatched: staged only
        assert actor.store.staged == 1 and actor.client.outstanding == sent
        records = outbox_records(actor.store)
        assert all(i <= actor.store.durable_outbox_id for i, _ in records(0, 1000))
        actor.end_turn()
        assert actor.store.staged == 0 and actor.client.outstanding == sent + 1
        assert max(i for i, _ in records(0, 1000)) == actor.store.durable_outbox_id


def test_a_decision_the_core_says_is_not_durable_is_answered_without_a_commit(
        settings: Settings) -> None:
    """A claim or a status changes nothing on disk (Decision.durable): answered in the turn
    without staging anything, so it neither waits for nor costs an fsync."""
    with dispatcher(settings) as actor:
        started = serve(actor, StartReplay(workflow=wf("s1"), machine_id="m1"))
        assert isinstance(started, ReplayStarted)
        e = actor.core.replays[started.replay_id].inflight
        assert e is not None
        actor._grouped = True
        claim = serve(actor, ClaimAttempt(replay_id=started.replay_id, machine_id="m1",
                                          action_id="s1", attempt_id=e.attempt_id))
        status = serve(actor, GetReplayStatus(replay_id=started.replay_id))
        assert isinstance(claim, ClaimReply) and claim.granted
        assert isinstance(status, ReplayStatusReply) and actor.store.staged == 0
        serve(actor, _report_of(actor, started.replay_id))
        assert actor.store.staged == 1  # durable: waits for end_turn


def test_watchdog_updates_wait_for_the_batch_outside_the_outbox(settings: Settings) -> None:
    with dispatcher(settings) as actor:
        started = serve(actor, StartReplay(workflow=wf("s1", "s2"), machine_id="m1"))
        assert isinstance(started, ReplayStarted)
        serve(actor, _report_of(actor, started.replay_id))
        actor._flush_sent()
        pending = [e for _, e in actor.store.pending_outbox()]
        # Track s1, Untrack s1, Track s2 wait for the batch; a restart re-sends (and tracks)
        # what is in flight, so they need no outbox rows.
        assert not [e for e in pending if isinstance(e, TrackInFlight | UntrackInFlight)]
        assert [type(u) for u in actor._watchdog] == [Track, Untrack, Track]
        actor._flush_watchdog()  # one request for the three
        assert actor.client.outstanding == 3  # the two dispatches and the batch
        # Only audit records stay in the outbox, until audit_log has them (AuditSender).
        assert {type(e) for e in pending} == {AuditRecord}


def _entry(action_id: str, attempt_id: str) -> InFlight:
    return InFlight(replay_id="r1", session_id="s", machine_id="m1", action_id=action_id,
                    attempt_id=attempt_id, action_type="click", dispatched_at=0.0)


def test_the_watchdog_applies_a_batch_in_order(settings: Settings) -> None:
    actor = WatchdogActor(settings)
    try:
        reply = serve(actor, TrackBatch(updates=[
            Track(entry=_entry("s1", "a1")), Untrack(action_id="s1", attempt_id="a1"),
            Track(entry=_entry("s2", "b1")), Track(entry=_entry("s2", "b2")),  # a resend
            Untrack(action_id="s2", attempt_id="b1"),  # late: b2 is the one tracked
            Untrack(action_id="s3", attempt_id="c1"), Track(entry=_entry("s3", "c1"))]))
        assert isinstance(reply, Ack) and reply.detail == {"updates": 7, "untracked": 1}
        assert len(actor.core) == 2
        assert actor.core.untrack("s2", "b2") and actor.core.untrack("s3", "c1")
    finally:
        actor.close()

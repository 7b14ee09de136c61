"""The dispatcher's hot path: reports committed without an fsync, hardened by the WAL syncer
thread (or by a durable commit past a bound); watchdog updates sent in batches."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from actors.dispatcher.effects import AuditRecord, TrackInFlight, UntrackInFlight
from actors.dispatcher.process import DispatcherActor
from actors.dispatcher.state import DispatcherConfig
from actors.dispatcher.store import DB_NAME, MAX_UNSYNCED_COMMITS, DispatcherStore
from actors.watchdog.process import WatchdogActor
from broker.config import Settings
from broker.worker import Request
from messages.base import Message
from messages.codec import decode, encode
from messages.dispatch import ActionReport, InFlight, Track, TrackBatch, Untrack
from messages.replay import Ack, ReplayStarted, StartReplay
from tests.conftest import free_port, wait_until
from tests.unit.test_dispatcher_core import H, act, wf
from tests.unit.test_dispatcher_process import dispatcher as process_dispatcher


def _steps(n: int) -> list[str]:
    return [f"s{i}" for i in range(n)]


def _report(store: DispatcherStore, h: H, rid: str, durable: bool) -> None:
    store.commit_decision(h.core.replays, h.report(rid), durable=durable)


def test_past_the_bound_a_non_durable_commit_is_made_durable(tmp_path: Path) -> None:
    store = DispatcherStore(tmp_path / DB_NAME, sync_interval_s=3600)  # syncer never runs
    h = H()
    rid, start = h.start(wf(*_steps(MAX_UNSYNCED_COMMITS + 5)), mode="autonomous")
    store.commit_decision(h.core.replays, start)
    assert store.last_durable and store.unsynced() == 0
    for i in range(MAX_UNSYNCED_COMMITS):
        _report(store, h, rid, durable=False)
        assert not store.last_durable and store.unsynced() == i + 1
    _report(store, h, rid, durable=False)  # past the bound: fsync'ed, and all before it too
    assert store.last_durable and store.unsynced() == 0
    _report(store, h, rid, durable=False)
    assert store.unsynced() == 1
    _report(store, h, rid, durable=True)
    assert store.last_durable and store.unsynced() == 0
    store.close()


def test_the_syncer_checkpoints_non_durable_commits_into_the_database_file(
        tmp_path: Path) -> None:
    path = tmp_path / DB_NAME
    store = DispatcherStore(path, sync_interval_s=0.01)
    h = H()
    rid, start = h.start(wf(*_steps(10)), mode="autonomous")
    store.commit_decision(h.core.replays, start)
    for _ in range(4):
        _report(store, h, rid, durable=False)
    wait_until(lambda: store.unsynced() == 0, timeout=10)
    # Checkpointed: the database file alone, without its WAL, already holds the 4 steps
    # (SQLite fsyncs the WAL before copying it there, then the file).
    alone = tmp_path / "alone.sqlite3"
    shutil.copyfile(path, alone)
    db = sqlite3.connect(alone)
    assert db.execute("SELECT count(*) FROM resolved WHERE replay_id = ?",
                      (rid,)).fetchone() == (4,)
    db.close()
    store.close()


def test_performed_rows_are_deleted_by_the_next_commit(tmp_path: Path) -> None:
    store = DispatcherStore(tmp_path / DB_NAME)
    h = H()
    rid, start = h.start(wf("s1", "s2"), mode="autonomous")
    first = store.commit_decision(h.core.replays, start)
    second = store.commit_decision(h.core.replays, h.report(rid),
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
    return decode(actor.serve(Request(client=b"c", body=[encode(message)]))).body


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


def test_only_reports_that_pause_a_replay_are_fsynced(settings: Settings) -> None:
    with dispatcher(settings) as actor:
        started = serve(actor, StartReplay(workflow=wf("s1", "s2", act("p", "pause_for_human"),
                                                       "s3"), machine_id="m1"))
        assert isinstance(started, ReplayStarted) and actor.store.last_durable
        rid = started.replay_id
        serve(actor, _report_of(actor, rid))  # s1 done, s2 dispatched
        assert not actor.store.last_durable
        serve(actor, _report_of(actor, rid))  # s2 done, the replay pauses (supervised)
        assert actor.core.replays[rid].status == "paused_need_help"
        assert actor.store.last_durable
        done = serve(actor, StartReplay(workflow=wf("t1"), machine_id="m2"))
        assert isinstance(done, ReplayStarted)
        serve(actor, _report_of(actor, done.replay_id))  # t1 done: completed
        assert actor.core.replays[done.replay_id].status == "completed"
        assert not actor.store.last_durable


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

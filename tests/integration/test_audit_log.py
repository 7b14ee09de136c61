"""The audit_log actor as a real process behind a real broker: appends acknowledged once
durable, re-sends stored once, kill -9 between and during appends loses nothing acknowledged
and duplicates nothing, and bad requests are refused whole while it keeps serving."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import msgpack
import pytest
import zmq

from audit_outbox.sender import AuditSender, conflict_id
from messages import decode
from messages.audit import (
    MAX_SCREENSHOT_BYTES,
    AppendRecords,
    AuditHead,
    AuditPage,
    AuditQuery,
    AuditRecordIn,
    AuditRecordOut,
    GetAuditHead,
    RecordsAcked,
)
from messages.base import Message
from messages.control import ErrorReply, Ping, Pong
from messages.events import BAD_MESSAGE
from tests.conftest import ROOT, Spawn, python_argv, wait_until
from tests.integration.system import tree_door
from transport.bus import Subscriber
from transport.client import Callback, CallFailed, Client, SyncClient


def record(replay: str, i: int, image: bytes | None = None, **data: object) -> AuditRecordIn:
    return AuditRecordIn(
        record_id=f"{replay}:{i}", source="dispatcher", kind="action_dispatched",
        replay_id=replay, at=1_700_000_000.0 + i,
        data={"action_id": f"s{i}", "attempt_id": f"{i:032x}", **data},
        screenshots={"after": image} if image is not None else {})


class AuditTree:
    """A broker and one audit_log actor, which a test may kill and start again."""

    def __init__(self, spawn: Spawn, env: dict[str, str]) -> None:
        self.spawn, self.env = spawn, env
        spawn(python_argv("-m", "broker"), env=env, name="broker")
        # The test speaks for the tree's senders (the dispatcher, the supervisor): its door.
        self.client = SyncClient(tree_door(env))
        self.async_client = Client(zmq.Context.instance(), tree_door(env))
        self.actor = self.start()

    def start(self) -> subprocess.Popen[bytes]:
        self.actor = self.spawn(python_argv("-m", "actors", "audit_log"), env=self.env,
                                name="audit_log")
        return self.actor

    def wait_serving(self) -> None:
        def pong() -> bool:
            try:
                return isinstance(self.call(Ping(), timeout_s=0.5), Pong)
            except CallFailed:
                return False
        wait_until(pong, timeout=20)

    def client_call(self, service: str, message: Message, callback: Callback,
                    timeout_s: float, retries: int) -> str:
        """A non-blocking call (an AuditSender's), answered by :meth:`pump`."""
        return self.async_client.call(service, message, callback, timeout_s, retries)

    def pump(self) -> None:
        """Wait a little for replies to :meth:`client_call`, and deliver them."""
        if self.async_client.socket.poll(50):
            self.async_client.drain()
        self.async_client.tick(time.monotonic())

    def call(self, message: AppendRecords | AuditQuery | GetAuditHead | Ping,
             timeout_s: float = 5.0) -> object:
        return self.client.call("audit_log", message, timeout_s=timeout_s, retries=0).body

    def all_records(self) -> list[AuditRecordOut]:
        found: list[AuditRecordOut] = []
        after = 0
        while True:
            page = self.call(AuditQuery(after_seq=after, limit=1000))
            assert isinstance(page, AuditPage)
            found += page.records
            if page.next_seq is None:
                return found
            after = page.next_seq

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "run.py", *args], env=self.env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)


@pytest.fixture
def audit_tree(spawn: Spawn, lea_env: dict[str, str]) -> Iterator[AuditTree]:
    tree = AuditTree(spawn, lea_env)
    tree.wait_serving()
    yield tree
    tree.client.close()
    tree.async_client.close()


def test_append_acks_once_durable_and_a_resend_is_not_stored_twice(
        audit_tree: AuditTree) -> None:
    batch = [record("rp1", i, image=b"png-%d" % (i % 2)) for i in range(30)]
    acked = audit_tree.call(AppendRecords(records=batch))
    assert isinstance(acked, RecordsAcked) and acked.durable
    assert acked.record_ids == [r.record_id for r in batch] and acked.duplicates == []
    again = audit_tree.call(AppendRecords(records=[*batch[:5], record("rp1", 30)]))
    assert isinstance(again, RecordsAcked)
    assert again.duplicates == [r.record_id for r in batch[:5]]
    head = audit_tree.call(GetAuditHead())
    assert isinstance(head, AuditHead) and (head.seq, head.records) == (31, 31)
    stored = audit_tree.all_records()
    assert [r.record_id for r in stored] == [f"rp1:{i}" for i in range(31)]
    assert stored[3].data["action_id"] == "s3"
    assert stored[3].screenshot_state == {"after": "stored"}
    assert stored[-1].hash == head.hash and stored[1].prev_hash == stored[0].hash
    assert audit_tree.cli("audit", "verify").returncode == 0


@pytest.mark.parametrize(("batches", "min_kills"), [
    (12, 6), pytest.param(150, 60, marks=pytest.mark.long)])
def test_kill9_during_appends_loses_no_acked_record_and_duplicates_none(
        audit_tree: AuditTree, batches: int, min_kills: int) -> None:
    """A killer thread kill -9s the actor while it is busy with the sender's batches (so in
    the middle of requests, before or after their commit) and starts it again; the sender
    re-sends each batch until it is acknowledged."""
    stop = threading.Event()
    served = threading.Event()  # an ack arrived since the last restart
    kills = 0

    def killer() -> None:
        nonlocal kills
        rng = random.Random(7)
        while not stop.is_set():
            if not served.wait(0.1):
                continue
            stop.wait(rng.uniform(0.0, 0.05))
            served.clear()
            os.kill(audit_tree.actor.pid, signal.SIGKILL)
            audit_tree.actor.wait()
            kills += 1
            audit_tree.start()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    acked: list[str] = []
    resent = duplicates = batch_no = 0
    try:
        while batch_no < batches or kills < min_kills:
            batch = [record(f"rp{batch_no % 3}", batch_no * 1000 + i,
                            image=os.urandom(20_000) if i % 10 == 0 else None)
                     for i in range(100)]
            while True:
                try:
                    reply = audit_tree.call(AppendRecords(records=batch), timeout_s=1.0)
                except CallFailed:
                    resent += 1
                    continue
                assert isinstance(reply, RecordsAcked), reply
                duplicates += len(reply.duplicates)
                served.set()
                break
            acked += reply.record_ids
            batch_no += 1
    finally:
        stop.set()
        thread.join()
    audit_tree.wait_serving()
    stored = [r.record_id for r in audit_tree.all_records()]
    assert len(stored) == len(set(stored)), "a record was stored twice"
    assert set(acked) <= set(stored), "an acknowledged record was lost"
    assert set(stored) == set(acked)
    result = audit_tree.cli("audit", "verify")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(stored)} records" in result.stdout
    print(f"{kills} kills, {resent} re-sends, {duplicates} duplicates acknowledged")


def _raw_append(body: dict[str, object]) -> bytes:
    packed: bytes = msgpack.packb({"v": 1, "type": "audit.append", "id": "bad",
                                   "body": body}, use_bin_type=True)
    return packed


def test_bad_requests_are_refused_whole_and_the_actor_keeps_serving(
        audit_tree: AuditTree, lea_env: dict[str, str]) -> None:
    audit_tree.call(AppendRecords(records=[record("rp", 0)]))
    ok = record("rp", 1).model_dump()
    refused: list[tuple[Callable[[], object], str]] = [
        (lambda: AppendRecords(records=[record("rp", 2), record("rp", 3, blob=b"png")]),
         "invalid_data"),
        (lambda: AppendRecords(records=[record("rp", i) for i in range(2, 1003)]),
         "too_many_records"),
        (lambda: AppendRecords(records=[record("rp", 2).model_copy(
            update={"source": "audit_log"})]), "reserved_source"),
        (lambda: AppendRecords(records=[record("rp", 2, image=b"x" * (MAX_SCREENSHOT_BYTES
                                                                      + 1))]),
         "screenshot_too_large"),
        (lambda: AppendRecords(records=[]), "empty_append"),
    ]
    for build, code in refused:
        with pytest.raises(CallFailed) as info:
            audit_tree.client.call("audit_log", build(), timeout_s=10.0, retries=0)  # type: ignore[arg-type]
        assert info.value.code == code
    malformed = [
        {"records": "not a list"},
        {"records": [{**ok, "kind": "Bad Kind!"}]},
        {"records": [{**ok, "screenshots": {"a": "not bytes"}}]},
        {"records": [{k: v for k, v in ok.items() if k != "record_id"}]},
        {"records": [{**ok, "extra": 1}]},
        {"records": [{**ok, "at": "yesterday"}]},
        {"records": [{**ok, "data": ["not", "a", "map"]}]},
        {"records": [ok], "more": True},
    ]
    for body in malformed:
        frames = audit_tree.client.raw("audit_log", _raw_append(body), timeout_s=5.0)
        reply = decode(frames[0]).body
        assert isinstance(reply, ErrorReply) and reply.code == "bad_message", (body, reply)
    with pytest.raises(CallFailed) as info:
        audit_tree.client.call("audit_log", AuditQuery.model_construct(
            replay_id=None, since=None, after_seq=0, limit=0), retries=0)
    assert info.value.code == "bad_message"
    head = audit_tree.call(GetAuditHead())
    assert isinstance(head, AuditHead) and head.records == 1, "a refused request left a record"
    # Refusals are reported on the bus (the subscriber may join late: refuse until seen).
    sub = Subscriber(audit_tree.client.ctx, lea_env["LEA_BUS_OUT_ENDPOINT"], BAD_MESSAGE)
    bad = AppendRecords(records=[record("rp", 5, blob=b"x")])

    def reported() -> bool:
        with pytest.raises(CallFailed):
            audit_tree.client.call("audit_log", bad, retries=0)
        event = sub.recv(timeout_s=0.2)
        return event is not None and event.data.get("reason") == "invalid_data"
    wait_until(reported, timeout=10)
    sub.close()
    assert isinstance(audit_tree.call(AppendRecords(records=[record("rp", 1)])), RecordsAcked)
    assert audit_tree.actor.poll() is None


def test_a_conflicting_id_is_not_acknowledged_and_its_record_is_kept_under_another(
        audit_tree: AuditTree) -> None:
    """The same record id with another content (what a rollback reusing outbox ids made):
    audit_log keeps the first, says `conflicting` and leaves the id out of the stored ones;
    the sender keeps the row and sends the record again under a name of its own."""
    first = record("rp1", 0, action_id="s0")
    assert isinstance(audit_tree.call(AppendRecords(records=[first])), RecordsAcked)
    other = record("rp1", 0, action_id="s9")  # same id, another content
    reply = audit_tree.call(AppendRecords(records=[other, record("rp1", 1)]))
    assert isinstance(reply, RecordsAcked)
    assert reply.conflicting == ["rp1:0"] and reply.record_ids == ["rp1:1"]

    rows = {7: other}  # a sender whose outbox row 7 holds that record
    let_go: list[int] = []
    sender = AuditSender(lambda after, limit: [(i, r) for i, r in rows.items() if i > after],
                         audit_tree.client_call, let_go.extend)
    deadline = time.monotonic() + 30
    while not let_go and time.monotonic() < deadline:
        sender.tick(time.monotonic())
        audit_tree.pump()
    assert let_go == [7] and sender.conflicts == 1
    stored = {r.record_id: r for r in audit_tree.all_records()}
    renamed = conflict_id(other)
    assert renamed.startswith("rp1:0+") and stored[renamed].data["action_id"] == "s9"
    assert stored["rp1:0"].data["action_id"] == "s0"  # the first one, untouched
    conflicts = [r for r in stored.values() if r.kind == "record_conflict"]
    assert {r.data["record_id"] for r in conflicts} == {"rp1:0"}
    assert audit_tree.cli("audit", "verify").returncode == 0

"""The audit trail in PostgreSQL (``LEA_DATABASE_URL``) with real processes and a real server
(tests/postgres.py, one per session): a replay's trail verifies there with ``audit verify``;
two audit_log actors (one per server, each with its own data directory) appending at once
while kill -9 takes one or the other make one chain, nothing acknowledged lost, nothing
stored twice; a server out of reach at start and a connection lost while serving end the
actor with the dispatcher's exit codes, for the supervisor's restart policy."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from collections import Counter
from pathlib import Path

import psycopg

from messages.audit import AppendRecords, GetScreenshot, RecordsAcked, Screenshot
from runtime.pg import describe
from tests.conftest import Spawn, free_port, python_argv, wait_until
from tests.integration.system import System, clicks, tree_door, workflow
from tests.integration.test_audit_log import AuditTree, record
from tests.integration.trail_checks import dispatches, export_all, run_cli, show_json
from tests.integration.transport_checks import wait_ready
from transport.client import CallFailed, SyncClient

Env = dict[str, str]
MAX_KILLS = 6


def test_a_replay_on_postgresql_leaves_a_trail_that_audit_verify_reads_there(
        spawn: Spawn, lea_env: Env, tmp_path: Path, pg_url: str) -> None:
    system = System(spawn, lea_env, tmp_path, {"LEA_DATABASE_URL": pg_url})
    agent = system.agent("a1", {"default": {"delay_s": 0.02}})
    wait_ready(system, agent)
    steps = [f"s{n}" for n in range(5)]
    rid = system.start(workflow(*clicks(5)), "a1")
    system.wait_status(rid, "completed", timeout=60)
    wait_until(lambda: any(r["kind"] == "replay_completed"
                           for r in show_json(system.env, rid)), timeout=30)
    records = export_all(system.env)
    assert Counter(a for a, _attempt in dispatches(records)) == Counter(steps)
    assert {(e["action_id"], e["attempt_id"]) for e in agent.effects()} <= set(
        dispatches(records))
    done = run_cli(system.env, "audit", "verify")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"audit trail intact ({describe(pg_url)})" in done.stdout
    data_dir = Path(system.env["LEA_DATA_DIR"])
    assert not (data_dir / "audit.db").exists()  # nothing of the trail on this disk
    with psycopg.connect(pg_url, options="-c search_path=audit") as conn:
        row = conn.execute("SELECT count(*) FROM records WHERE replay_id = %s",
                           (rid,)).fetchone()
    assert row is not None and row[0] == len(show_json(system.env, rid))


def test_two_audit_logs_appending_at_once_with_kill_9_make_one_chain(
        spawn: Spawn, lea_env: Env, tmp_path: Path, pg_url: str) -> None:
    """Two senders send batches at once; the broker hands them to two audit_log actors (each
    its own data directory, as on two servers), one or the other of which a killer thread
    kill -9s and starts again. Each batch is re-sent until acknowledged."""
    # One broker door for both (by default each data directory has its own), and one image
    # keyring, as on two servers of one trail (docs/operations.md).
    envs = [{**lea_env, "LEA_DATABASE_URL": pg_url, "LEA_DATA_DIR": str(tmp_path / name),
             "LEA_TREE_ENDPOINT": f"ipc://{tmp_path}/tree.sock",
             "LEA_IMAGE_KEYRING": str(tmp_path / "image-keys.json")}
            for name in ("server-a", "server-b")]
    tree = AuditTree(spawn, envs[0])
    actors = [tree.actor, spawn(python_argv("-m", "actors", "audit_log"), env=envs[1],
                                name="audit_log_b")]
    tree.wait_serving()
    stop = threading.Event()
    served = threading.Event()  # an ack arrived since the last restart
    kills = 0
    acked: list[str] = []
    lock = threading.Lock()

    def killer() -> None:
        """Kills one actor, then the other, each time while appends are being served."""
        nonlocal kills
        rng = random.Random(11)
        while not stop.is_set() and kills < MAX_KILLS:
            if not served.wait(0.1):
                continue
            stop.wait(rng.uniform(0.0, 0.05))
            served.clear()
            which = kills % 2
            os.kill(actors[which].pid, signal.SIGKILL)
            actors[which].wait()
            kills += 1
            actors[which] = spawn(python_argv("-m", "actors", "audit_log"), env=envs[which],
                                  name=f"audit_log_{which}")

    def sender(name: str, batches: int) -> None:
        client = SyncClient(tree_door(envs[0]))
        try:
            for b in range(batches):
                batch = [record(f"{name}-{b % 2}", b * 100 + i,
                                image=os.urandom(5_000) if i % 10 == 0 else None)
                         for i in range(40)]
                while True:
                    try:
                        reply = client.call("audit_log", AppendRecords(records=batch),
                                            timeout_s=1.0, retries=0).body
                    except CallFailed:
                        continue
                    assert isinstance(reply, RecordsAcked), reply
                    served.set()
                    break
                with lock:
                    acked.extend(reply.record_ids)
        finally:
            client.close()

    senders = [threading.Thread(target=sender, args=(name, 25)) for name in ("x", "y")]
    kill_thread = threading.Thread(target=killer, daemon=True)
    for thread in [*senders, kill_thread]:
        thread.start()
    for thread in senders:
        thread.join(timeout=240)
    stop.set()
    kill_thread.join()
    assert not any(t.is_alive() for t in senders)
    tree.wait_serving()
    stored = [r.record_id for r in tree.all_records()]
    assert len(stored) == len(set(stored)), "a record was stored twice"
    assert set(acked) <= set(stored), "an acknowledged record was lost"
    assert set(stored) == set(acked) and len(stored) == 2 * 25 * 40
    # Each server's verify: the chain in PostgreSQL, and its own anchor (written by its
    # actor after its appends: both served).
    for env in envs:
        done = run_cli(env, "audit", "verify")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{len(stored)} records" in done.stdout and "1 anchors checked" in done.stdout
    print(f"{kills} kills")
    assert kills >= 2


def test_audit_log_says_postgresql_is_unreachable_and_exits_69(
        spawn: Spawn, lea_env: Env) -> None:
    env = {**lea_env, "LEA_DATABASE_URL": f"postgresql://lea@127.0.0.1:{free_port()}/x"}
    done = subprocess.run(python_argv("-m", "actors", "audit_log"), env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 69, done.stderr
    assert "audit_log: PostgreSQL at 127.0.0.1:" in done.stderr and "is unreachable" in \
        done.stderr


def test_a_lost_connection_ends_audit_log_with_75_and_nothing_acknowledged_is_lost(
        spawn: Spawn, lea_env: Env, pg_url: str) -> None:
    tree = AuditTree(spawn, {**lea_env, "LEA_DATABASE_URL": pg_url})
    tree.wait_serving()
    image = b"\x89PNG evidence" * 100
    first = tree.call(AppendRecords(records=[record("lost", i, image=image if i == 0 else None)
                                             for i in range(10)]))
    assert isinstance(first, RecordsAcked)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the server drops the session
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                     "datname = current_database() AND pid <> pg_backend_pid()")
    batch = [record("lost", i) for i in range(5, 20)]
    try:
        tree.call(AppendRecords(records=batch), timeout_s=5.0)
    except CallFailed:
        pass  # the actor stopped before answering
    assert tree.actor.wait(timeout=30) == 75
    tree.start()
    tree.wait_serving()
    again = tree.call(AppendRecords(records=batch))  # the sender's re-send
    # (The broker may also have handed the first copy, still queued, to the new actor.)
    assert isinstance(again, RecordsAcked) and again.record_ids == [r.record_id for r in batch]
    assert {f"lost:{i}" for i in range(5, 10)} <= set(again.duplicates)
    stored = tree.all_records()
    assert [r.record_id for r in stored] == [f"lost:{i}" for i in range(20)]
    assert stored[0].screenshot_state == {"after": "stored"}
    shot = tree.client.call("audit_log", GetScreenshot(sha256=stored[0].screenshots["after"]),
                            timeout_s=5.0, retries=0).body
    assert isinstance(shot, Screenshot) and shot.data == image  # from the database
    assert run_cli(tree.env, "audit", "verify").returncode == 0


def test_verify_says_when_postgresql_holds_no_trail_or_cannot_be_reached(
        lea_env: Env, pg_url: str) -> None:
    empty = run_cli({**lea_env, "LEA_DATABASE_URL": pg_url}, "audit", "verify")
    assert empty.returncode == 2 and "no audit database: no audit trail (schema audit) in " \
        f"PostgreSQL at {describe(pg_url)}" in empty.stderr
    with psycopg.connect(pg_url) as conn:  # verify created nothing
        row = conn.execute("SELECT to_regnamespace('audit')").fetchone()
    assert row is not None and row[0] is None
    away = f"postgresql://lea@127.0.0.1:{free_port()}/x"
    down = run_cli({**lea_env, "LEA_DATABASE_URL": away}, "audit", "verify")
    assert down.returncode == 2 and f"PostgreSQL at {describe(away)} is unreachable" in \
        down.stderr

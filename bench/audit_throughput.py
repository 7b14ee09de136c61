#!/usr/bin/env python3
"""Audit records durably stored per second, through the broker to the audit_log actor.

A broker and one audit_log actor run as their own processes on free ports (the rest of the
tree plays no part in this path). Senders are DEALER clients in this process, each with
one batch outstanding, the next sent only once the previous is acknowledged, and an
acknowledgement only comes after the fsync'ed commit (WAL, synchronous=FULL). Requests are
encoded before the clock starts. Runs: one sender unbatched and batched; ``--senders``
senders at once (one per replay); the same with a screenshot in one record out of three.

``--postgresql``: the actor keeps the trail in PostgreSQL (``LEA_DATABASE_URL``: a throwaway
server of Debian's binaries on this machine's disk, or ``--database-url``); the floors stay
the same, for the comparison.

Two floors, measured in the same run: SQLite, raw (same schema shape, same durability, one
commit per batch of the same size, the same screenshot files written + fsync'ed + renamed),
no broker, no validation, no hashing; and echo, the same requests from the same senders
through the broker to a worker that answers at once and stores nothing (the transport).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zmq
from benchkit import ECHO, ROOT, CpuMeter, free_port, quiet_logs, verdict

from actors.audit_log.chain import canonical
from actors.audit_log.image_keys import ImageCipher
from actors.audit_log.screenshots import ScreenshotFiles
from cli.ping import service_pid
from messages.audit import AppendRecords, AuditHead, AuditRecordIn, GetAuditHead
from messages.codec import decode, encode
from transport import mdp
from transport.client import SyncClient

TARGET = 5000.0


@dataclass(frozen=True)
class Scenario:
    label: str
    senders: int
    batch: int
    records: int  # in all
    shot_every: int = 0  # one record in N carries a screenshot (0: none)


def make_record(replay: str, i: int, shot_every: int, shot_bytes: int) -> AuditRecordIn:
    """Like the dispatcher's: ids, action, attempt, monitor resolution (~400 B of data)."""
    image = (os.urandom(shot_bytes) if shot_every and i % shot_every == 0 else None)
    return AuditRecordIn(
        record_id=f"{replay}:{i}", source="dispatcher",
        kind="action_dispatched" if i % 2 == 0 else "action_reported", replay_id=replay,
        at=time.time(),
        data={"replay_id": replay, "session_id": replay, "machine_id": "ws-042",
              "action_id": f"s{i // 2}", "attempt_id": os.urandom(16).hex(),
              "action_type": "click", "resent_count": 0, "resend_reason": None,
              "monitor_resolution": {"idx": 1, "offset_x": 1920, "offset_y": 0, "w": 1920,
                                     "h": 1080, "source": "focus"},
              "success": True, "warning": None, "resolution_method": "template",
              "resolution_score": 0.9731, "target_description": "bouton Valider"},
        screenshots={"after": image} if image is not None else {})


Batches = list[list[list[AuditRecordIn]]]
"""Per sender, its batches, in order."""


def build(s: Scenario, tag: str, shot_bytes: int) -> Batches:
    """Per sender, its batches (records of its own replay)."""
    per = s.records // s.senders
    out = []
    for k in range(s.senders):
        replay = f"{tag}-{k}"
        recs = [make_record(replay, i, s.shot_every, shot_bytes) for i in range(per)]
        out.append([recs[j:j + s.batch] for j in range(0, per, s.batch)])
    return out


# Through the broker and the actor ----------------------------------------------------------

def run_senders(endpoint: str, batches: Batches, service: str = "audit_log") -> float:
    """Seconds to get every batch acknowledged, one outstanding per sender (``service``
    ECHO: the same requests echoed by a worker that stores nothing, the transport floor)."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    payloads = [[mdp.client_request(service.encode(), encode(AppendRecords(records=b)))
                 for b in mine] for mine in batches]
    socks = []
    for _ in payloads:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        socks.append(sock)
    time.sleep(0.2)  # connections up before the clock starts
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    nxt = [0] * len(socks)
    start = time.perf_counter()
    for k, sock in enumerate(socks):
        sock.send_multipart(payloads[k][0])
    busy = len(socks)
    index = {sock: k for k, sock in enumerate(socks)}
    while busy:
        ready = poller.poll(30_000)
        if not ready:
            raise RuntimeError("no acknowledgement for 30 s")
        for sock, _ in ready:
            k = index[sock]
            frames = sock.recv_multipart()
            if service != ECHO and decode(frames[3]).body.type_name != "audit.acked":
                raise RuntimeError(f"not acknowledged: {decode(frames[3]).body}")
            nxt[k] += 1
            if nxt[k] < len(payloads[k]):
                socks[k].send_multipart(payloads[k][nxt[k]])
            else:
                busy -= 1
    elapsed = time.perf_counter() - start
    for sock in socks:
        sock.close(0)
    return elapsed


# The floor: raw SQLite, same durability ------------------------------------------------------

def floor(tmp: Path, batches: Batches) -> float:
    """Seconds to insert + commit (WAL, FULL) the same rows in the same batches, one sender
    after the other (SQLite has one writer anyway); images written and fsync'ed first."""
    db_path = tmp / f"floor-{time.monotonic_ns()}.db"
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE records (seq INTEGER PRIMARY KEY, record_id TEXT UNIQUE, "
               "source TEXT, kind TEXT, replay_id TEXT, at REAL, stored_at REAL, data TEXT, "
               "screenshots TEXT, prev_hash TEXT, hash TEXT)")
    # Sealed as the actor seals them (AES-GCM): part of the work, not of the overhead.
    cipher = ImageCipher(tmp / f"floor-keys-{time.monotonic_ns()}.json")
    cipher.load(create=True)
    files = ScreenshotFiles(tmp / f"floor-shots-{time.monotonic_ns()}", cipher)
    rows = [[[(r.record_id, r.source, r.kind, r.replay_id, r.at, r.at,
               canonical(r.data).decode(), "{}", "0" * 64, "0" * 64) for r in b]
             for b in mine] for mine in batches]
    images = [[[img for r in b for img in r.screenshots.values()] for b in mine]
              for mine in batches]
    start = time.perf_counter()
    for mine, shots in zip(rows, images, strict=True):
        for batch, batch_images in zip(mine, shots, strict=True):
            if batch_images:
                files.put_many(batch_images)
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO records (record_id, source, kind, replay_id, at, "
                           "stored_at, data, screenshots, prev_hash, hash) VALUES "
                           "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", batch)
            db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    files.close()
    return elapsed


# Processes -------------------------------------------------------------------------------

@contextlib.contextmanager
def audit_service(keep: bool, database_url: str = ""
                  ) -> Iterator[tuple[str, Path, dict[str, int]]]:
    """A broker and an audit_log actor (its trail in PostgreSQL at ``database_url`` if
    given); (the tree's door, tmp dir, pids). The bench sends as the tree's senders do,
    through the tree's door (audit.append is taken from there only), and so does its floor."""
    tmp = Path(tempfile.mkdtemp(prefix="lea-audit-bench-"))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    door = f"ipc://{tmp}/tree.sock"
    env = dict(os.environ, LEA_MDP_ENDPOINT=endpoint, LEA_TREE_ENDPOINT=door,
               LEA_BUS_IN_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
               LEA_BUS_OUT_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
               LEA_DATA_DIR=str(tmp / "var"), LEA_LOG_LEVEL="WARNING",
               PYTHONPATH=str(ROOT), LEA_DATABASE_URL=database_url)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, argv in (("broker", ["-m", "broker"]),
                           ("audit_log", ["-m", "actors", "audit_log"]),
                           ("echo", [str(Path(__file__).parent / "benchkit.py"), "echo",
                                     endpoint])):
            with open(tmp / f"{name}.log", "ab") as log:
                procs.append(subprocess.Popen([sys.executable, *argv], env=env, cwd=ROOT,
                                              stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True))
        client = SyncClient(door)
        deadline = time.monotonic() + 30
        while service_pid(client, "audit_log") is None or \
                client.raw("mmi.service", ECHO.encode())[:1] != [b"200"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"audit_log or the echo worker not serving; see {tmp}")
            time.sleep(0.05)
        client.close()
        yield door, tmp, {"broker": procs[0].pid, "audit_log": procs[1].pid}
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(10)
        if keep:
            print(f"(kept {tmp})")
        else:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


def head(endpoint: str) -> AuditHead:
    client = SyncClient(endpoint)
    try:
        reply = client.call("audit_log", GetAuditHead()).body
    finally:
        client.close()
    assert isinstance(reply, AuditHead)
    return reply


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000, help="per batched run")
    parser.add_argument("--senders", type=int, default=50)
    parser.add_argument("--batch", type=int, default=100, help="one sender's batch size")
    parser.add_argument("--concurrent-batch", type=int, default=20,
                        help="batch size of each of the concurrent senders")
    parser.add_argument("--shot-kb", type=int, default=30, help="screenshot size (KiB)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--postgresql", action="store_true",
                        help="the trail in PostgreSQL (LEA_DATABASE_URL): a throwaway server "
                        "of Debian's binaries, or --database-url")
    parser.add_argument("--database-url", default="", help="with --postgresql: this database")
    args = parser.parse_args()
    quiet_logs()
    scenarios = [
        Scenario("1 sender, unbatched (batch 1)", 1, 1, min(args.records, 2000)),
        Scenario(f"1 sender, batch {args.batch}", 1, args.batch, args.records),
        Scenario(f"{args.senders} senders, batch {args.concurrent_batch}", args.senders,
                 args.concurrent_batch, args.records),
        Scenario(f"{args.senders} senders, batch {args.concurrent_batch}, 1 in 3 with a "
                 f"{args.shot_kb} KiB screenshot", args.senders, args.concurrent_batch,
                 args.records // 5, shot_every=3),
    ]
    where = "PostgreSQL" if args.postgresql else "SQLite"
    print(f"audit_log, trail in {where}: records/s durably stored (ack after the durable "
          "commit)")
    print(f"  {'run':<58} {'ours':>8} {'SQLite':>8} {'ratio':>6} {'echo':>8} {'ratio':>6}"
          "  actor CPU/record")
    results: dict[Scenario, float] = {}
    with contextlib.ExitStack() as stack:
        url = ""
        if args.postgresql:
            from store_backends import postgres

            url = stack.enter_context(postgres(args.database_url))
        endpoint, tmp, pids = stack.enter_context(audit_service(args.keep, url))
        meter = CpuMeter(pids)
        stored = 0
        for n, s in enumerate(scenarios):
            batches = build(s, f"run{n}", args.shot_kb * 1024)
            total = sum(len(b) for mine in batches for b in mine)
            meter.used = {}
            meter.start()
            ours = total / run_senders(endpoint, batches)
            used = meter.stop().get("audit_log", 0.0)
            raw = total / floor(tmp, batches)
            echo = total / run_senders(endpoint, batches, ECHO)
            stored += total
            results[s] = ours
            print(f"  {s.label:<58} {ours:>8,.0f} {raw:>8,.0f} {raw / ours:5.1f}× {echo:>8,.0f}"
                  f" {echo / ours:5.1f}×  {used / total * 1e6:6.0f} µs")
        final = head(endpoint)
        if final.records != stored:
            raise RuntimeError(f"{final.records} records stored, expected {stored}")
    plain = min(v for s, v in results.items() if s.batch > 1 and not s.shot_every)
    shots = min(v for s, v in results.items() if s.shot_every)
    print(f"target ≥ {TARGET:,.0f} records/s with batching: {verdict(plain >= TARGET)} "
          f"(lowest batched run {plain:,.0f}/s); with screenshots {verdict(shots >= TARGET)} "
          f"({shots:,.0f}/s, bound by one fsync'ed file per image)")
    print(f"all {stored:,} records stored once (checked against the chain head)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

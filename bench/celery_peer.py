#!/usr/bin/env python3
"""Per-step latency of one agent's strictly ordered steps: ours beside Celery + Redis.

    python bench/celery_peer.py [--action wait|click] [--steps 100] [--rounds 10]

Ours: bench/turnaround.py's replay (a full tree, one bench agent, no-op steps), the
per-step overhead from the agent's report to the moment the next action may start (the next
dispatch; for a click, its claim granted). The peer, as a team would build it with those
tools (bench/celery_steps.py): a Celery worker per workstation consuming its own queue
(solo pool, prefetch 1), Redis as broker and result backend, the orchestrator sending one
step and waiting for its result before the next; its per-step latency is from one task's end
to the next one's start, both read in the worker on the machine's monotonic clock. A Celery
step has no claim, no monitor, no durable state: it is the floor such a team starts from.
Rounds alternate (broker round-trip block, our replay, Celery's steps) so that the noise of
a shared machine hits all three alike. Needs ``redis-server`` (Debian's) and the ``bench``
extra (``pip install -e .[bench]``: celery, redis); says so and stops without them.
Target: ours at most half of Celery's p50.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import (
    broker_round_trips,
    dispatch_sized_body,
    free_port,
    pct,
    quiet_logs,
    row,
    tree,
    verdict,
)
from turnaround import one_agent, run_replay

from messages.workflow import INPUT_TYPES

HERE = Path(__file__).resolve().parent
QUEUE = "agent.bench"
TARGET = 0.5


def start_redis(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """redis-server on a free port (its defaults otherwise: no append-only file)."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--dir", str(data_dir), "--save", ""],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    deadline = time.monotonic() + 30
    while True:
        try:
            if redis.Redis.from_url(url).ping():
                return proc, url
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.05)


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    """One Celery worker for the workstation's queue, as bench/celery_steps.py defines it."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_steps", "worker", "-Q", QUEUE,
         "-P", "solo", "-c", "1", "-l", "WARNING", "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        cwd=HERE, env={**os.environ, "BENCH_CELERY_REDIS": url},
        stdout=log.open("wb"), stderr=subprocess.STDOUT)


def celery_steps(module: ModuleType, n: int, kind: str) -> list[float]:
    """``n`` steps one after the other; the gaps between one's end and the next's start."""
    gaps: list[float] = []
    last_end: float | None = None
    for i in range(n):
        result = module.step.apply_async((i, kind), queue=QUEUE)
        _index, started, ended = result.get(timeout=30)
        result.forget()
        if last_end is not None:
            gaps.append(started - last_end)
        last_end = ended
    return gaps


def missing() -> str | None:
    """What this machine lacks to run the peer, or None."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (Debian: apt-get install redis-server)"
    for name in ("celery", "redis"):
        try:
            importlib.import_module(name)
        except ImportError:
            return f"python package {name!r} is missing (pip install -e .[bench])"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--action", default="wait", choices=["wait", "click"])
    parser.add_argument("--steps", type=int, default=100, help="steps per round, each side")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--round-trips", type=int, default=250)
    args = parser.parse_args(argv)
    lacking = missing()
    if lacking is not None:
        print(f"celery_peer: cannot run the peer: {lacking}")
        return 2
    quiet_logs()
    body = dispatch_sized_body()
    rtts: list[float] = []
    ours_all: list[float] = []
    theirs: list[float] = []
    scratch = Path(tempfile.mkdtemp(prefix="lea-celery-"))
    redis_proc, url = start_redis(scratch)
    worker: subprocess.Popen[bytes] | None = None
    try:
        os.environ["BENCH_CELERY_REDIS"] = url
        module = importlib.import_module("celery_steps")
        worker = start_worker(url, scratch / "worker.log")
        module.step.apply_async((0, "ready"), queue=QUEUE).get(timeout=120)  # worker up
        celery_steps(module, 20, args.action)  # warm-up, not counted
        with tree() as t, one_agent(t, "bench-celery-peer", args.action) as (host, agent):
            t.echo_worker()
            for _ in range(args.rounds):
                rtts += broker_round_trips(t.endpoint, args.round_trips, body)
                run_replay(t, host, agent, args.steps, args.action, 120)
                theirs += celery_steps(module, args.steps, args.action)
            ours_all = list(agent.overheads)
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(10)
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(scratch, ignore_errors=True)
    end = "grant" if args.action in INPUT_TYPES else "next"
    print(f"celery_peer: 1 agent, {args.rounds} rounds x {args.steps} no-op '{args.action}' "
          "steps each side, back to back")
    print(row("broker round trip (echo worker)", rtts))
    print(row(f"ours: report -> {end}", ours_all))
    print(row("Celery + Redis: end -> next start", theirs))
    ratio = pct(ours_all, 50) / pct(theirs, 50)
    print(f"  ours / Celery p50: {ratio:.2f}x (target <= {TARGET:g}x: "
          f"{verdict(ratio <= TARGET)}); ours / round trip p50: "
          f"{pct(ours_all, 50) / pct(rtts, 50):.1f}x; Celery / round trip p50: "
          f"{pct(theirs, 50) / pct(rtts, 50):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

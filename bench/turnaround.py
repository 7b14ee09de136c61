#!/usr/bin/env python3
"""Per-step overhead of one agent, beside the broker round trip measured in the same run.

One bench agent (bench/bench_agent.py: the agent's protocol, no-op actions) runs replays of
no-op steps on a full tree (`python run.py`: broker and the six actors): ``wait`` (0 ms) by
default, or ``--action click`` (at two places in turn: one place thrice is a loop). The
per-step overhead is what the agent sees: from sending its ActionReport to the moment the next
action may start. For ``wait`` that is receiving the next DispatchAction; for ``click``, an
input action, it is receiving the ``ClaimReply(granted=True)`` for it (the agent claims every
input action from the dispatcher before running it, and is told "not yet" while the loop
verdict on the step before is pending). The floor is the broker round trip client → broker
→ echo worker → broker → client, with a dispatch-sized body, measured in blocks interleaved
with the replays. Target: overhead p50 <= 5x the broker round trip p50.

A second floor, the disk's: each step waits for one fsync of the dispatcher's database (its
turn's commit, docs/durability.md), so blocks of flushes of a 4 KiB write to a file beside that
database, as the dispatcher flushes its WAL (written over in place: fdatasync, no append that
would also journal the file's size), are measured in the same rounds (:func:`disk_flushes`),
and the overhead is also given over the sum of both floors: on a disk whose flush alone is
several round trips, that sum is what a step cannot go below without giving up the
durability rule.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zmq
from bench_agent import BenchAgent, Host
from benchkit import (
    CpuMeter,
    Tree,
    broker_round_trips,
    dispatch_sized_body,
    noop_workflow,
    pct,
    quiet_logs,
    row,
    tree,
    verdict,
)

from messages.replay import GetReplayStatus, ReplayStarted, ReplayStatusReply, StartReplay
from messages.workflow import INPUT_TYPES

TARGET_RATIO = 5.0
FLUSHES = 50
"""fsyncs per block of the disk floor (a block per round)."""


def disk_flushes(directory: Path, count: int = FLUSHES) -> list[float]:
    """Seconds of ``count`` fdatasyncs, each of a 4 KiB write over a file in ``directory``
    (the dispatcher's data directory: the same disk as its database) made beforehand, as
    SQLite's WAL is written over in place once it has its size."""
    path = directory / "bench-flush.bin"
    block = os.urandom(4096)
    times: list[float] = []
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, bytes(4096 * count))
        os.fsync(fd)
        for i in range(count):
            os.pwrite(fd, block, 4096 * i)
            started = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return times


def run_replay(t: Tree, host: Host, agent: BenchAgent, steps: int, action: str,
               timeout_s: float, meter: CpuMeter | None = None) -> None:
    """Start a replay of ``steps`` no-op actions on ``agent`` and serve it to completion."""
    if meter is not None:
        meter.start()
    reply = t.client.call("dispatcher", StartReplay(
        workflow=noop_workflow(steps, action), machine_id=agent.machine_id,
        mode="autonomous")).body
    assert isinstance(reply, ReplayStarted), reply
    target = len(agent.reported_at) + steps
    if not host.run_until(lambda: len(agent.reported_at) >= target and agent.settled,
                          timeout_s):
        raise RuntimeError(f"replay {reply.replay_id} did not finish in {timeout_s}s")
    if meter is not None:
        meter.stop()
    status = t.client.call("dispatcher", GetReplayStatus(replay_id=reply.replay_id)).body
    assert isinstance(status, ReplayStatusReply)
    if status.replays[0].status != "completed":
        raise RuntimeError(f"replay ended {status.replays[0].status}")
    agent.report_sent_at = None  # the last report of a replay is followed by no dispatch


@contextlib.contextmanager
def one_agent(t: Tree, name: str, action: str) -> Iterator[tuple[Host, BenchAgent]]:
    """A bench agent on ``t``, its hello answered and a warm-up replay served (not counted)."""
    ctx: zmq.Context[object] = zmq.Context()
    agent = BenchAgent(ctx, t.endpoint, name)
    host = Host([agent], t.check)
    try:
        if not host.run_until(lambda: agent.settled, 30):
            raise RuntimeError("the dispatcher did not answer the hello")
        run_replay(t, host, agent, 20, action, 60)
        agent.overheads.clear()
        yield host, agent
    finally:
        host.close()
        ctx.term()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100, help="steps per replay (100)")
    parser.add_argument("--rounds", type=int, default=20,
                        help="rounds of (round-trip block, replay), interleaved so that the "
                             "machine's noise hits both alike (20)")
    parser.add_argument("--round-trips", type=int, default=250,
                        help="broker round trips per block (250)")
    parser.add_argument("--action", default="wait", choices=["wait", "click"],
                        help="type of the no-op actions (wait, 0 ms); a click is claimed "
                             "before it runs: its overhead ends at the claim granted")
    parser.add_argument("--keep", action="store_true", help="keep the logs and data dir")
    args = parser.parse_args(argv)
    quiet_logs()
    started = time.monotonic()
    body = dispatch_sized_body()
    rtts: list[float] = []
    flushes: list[float] = []
    ratios: list[float] = []  # per round: its replay's p50 over its own block's p50
    with tree(keep=args.keep) as t:
        t.echo_worker()
        meter = CpuMeter(t.pids())
        with one_agent(t, "bench-turnaround", args.action) as (host, agent):
            for _ in range(args.rounds):
                block = broker_round_trips(t.endpoint, args.round_trips, body)
                flushes += disk_flushes(t.tmp / "var")
                before = len(agent.overheads)
                run_replay(t, host, agent, args.steps, args.action, 120, meter)
                rtts += block
                ratios.append(pct(agent.overheads[before:], 50) / pct(block, 50))
    overheads = agent.overheads
    ratio = pct(overheads, 50) / pct(rtts, 50)
    print(f"turnaround: 1 bench agent, {args.rounds} replays x {args.steps} no-op "
          f"'{args.action}' steps, full tree (broker + 6 actors), {time.monotonic() - started:.1f}"
          " s in all")
    print(row("broker round trip (echo worker)", rtts))
    print(row("disk flush (fdatasync, 4 KiB over)", flushes))
    # The end of the overhead: when the next action may start (module docstring).
    end = "grant" if args.action in INPUT_TYPES else "next"
    print(row(f"per-step overhead (report -> {end})", overheads))
    print(f"  ratio p50 overhead / p50 round trip: {ratio:.1f}x (target <= {TARGET_RATIO:g}x:"
          f" {verdict(ratio <= TARGET_RATIO)}); p99 ratio "
          f"{pct(overheads, 99) / pct(rtts, 99):.1f}x; per round: median "
          f"{statistics.median(ratios):.1f}x, {min(ratios):.1f}x to {max(ratios):.1f}x")
    floors = pct(rtts, 50) + pct(flushes, 50)
    print(f"  ratio p50 overhead / (p50 round trip + p50 disk flush): "
          f"{pct(overheads, 50) / floors:.1f}x")
    print(f"  CPU per step in the tree: {meter.per_step(args.rounds * args.steps)}")
    if args.action in INPUT_TYPES:
        print(f"  claims answered 'not yet' (a loop verdict pending), asked again: "
              f"{agent.not_yet}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

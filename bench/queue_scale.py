#!/usr/bin/env python3
"""Work queues at scale, beside the one-step replay started by hand, measured in the same run.

A full tree (`python run.py`: broker and the six actors, every one on) and bench agents
(bench/bench_agent.py, no-op actions) in two pools, each serving a queue of one-click items
(docs/queues.md). Printed:

- queueing: the time to add ``--items`` items (one ``queue.add``, all or nothing);
- items per second through the pools, and CPU of the tree per item;
- from "an agent is free" (its report of an item's last step sent) to its next item's first
  dispatch: p50 / p99;
- the floor, in the same run: a one-click replay started by hand (``replay.start``), from
  the request to its first dispatch, and the tree's CPU per such replay;
- each item at most once: no item's step ran on two agents or in two replays, and every item
  ended ``done`` (or, with ``--kill``, ``needs_person`` for those whose agent died after the
  click was dispatched).

``--kill``: the dispatcher and 5 agents are killed -9 when a third of the items are done.
Goals (docs/queues.md): queueing 10,000 items under 5 s; per-item overhead at most 2x the one-step
replay by hand; choosing the next item does not grow with the queue (compare ``--items``
1,000 and 10,000: the "free -> next dispatch" figures stay alike).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zmq
from bench_agent import BenchAgent, Host
from benchkit import CpuMeter, Tree, noop_workflow, pct, quiet_logs, row, tree, verdict

from messages.codec import encode, new_id
from messages.dispatch import DispatchAction
from messages.queue import (
    AddItems,
    AgentAvailable,
    CreateQueue,
    QueueItemIn,
    QueueReply,
    ShowQueue,
)
from messages.replay import GetReplayStatus, ReplayStarted, ReplayStatusReply, StartReplay

QUEUEING_GOAL_S = 5.0
OVERHEAD_GOAL = 2.0
ANNOUNCE_S = 1.0  # as agent/process.py AVAILABLE_EVERY_S
FAST_WATCHDOG = {"RPA_WATCHDOG_SCAN_INTERVAL_S": "0.5", "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "3"}


class Pool:
    """Bench agents of pools, announcing themselves as agents do (``agent.available``), and
    the timings of their items."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, pools: dict[str, int]) -> None:
        self.first_dispatch: dict[str, float] = {}  # replay id -> monotonic
        self.gaps: list[float] = []  # free -> next item's first dispatch
        self.agents: list[BenchAgent] = []
        self.pool_of: dict[str, str] = {}
        for pool, n in pools.items():
            for i in range(n):
                a = BenchAgent(ctx, endpoint, f"{pool}-{i}", on_dispatch=self._dispatched)
                self.agents.append(a)
                self.pool_of[a.machine_id] = pool
        self.everyone = list(self.agents)  # the killed ones too: what they ran counts
        self.dead: set[str] = set()
        self.host = Host(self.agents)
        self._told = 0.0

    def _dispatched(self, agent: BenchAgent, d: DispatchAction, at: float) -> bool:
        if d.replay_id not in self.first_dispatch:
            self.first_dispatch[d.replay_id] = at
            if agent.reported_at and self.pool_of[agent.machine_id] != "manual":
                self.gaps.append(at - agent.reported_at[-1])
        return agent.machine_id not in self.dead

    def announce(self, now: float) -> None:
        if now - self._told < ANNOUNCE_S:
            return
        self._told = now
        for a in self.agents:
            if a.machine_id in self.dead:
                continue
            msg_id = new_id()
            data = encode(AgentAvailable(machine_id=a.machine_id, instance_id=a.instance_id,
                                         pool=self.pool_of[a.machine_id]), msg_id)
            a.requests.send("available", msg_id, data, lambda *_: True, now)

    def run_until(self, done: Any, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.announce(time.monotonic())
            if done():
                return True
            self.host.step()
        return False

    def kill(self, n: int) -> list[str]:
        """``n`` agents stop dead, as kill -9 would: no report, no DISCONNECT, no return."""
        victims = [a for a in self.agents if a.machine_id not in self.dead][:n]
        for a in victims:
            self.dead.add(a.machine_id)
            self.host.forget(a)
            a.worker.socket.close(0)
            a.requests.close()
        self.agents[:] = [a for a in self.agents if a.machine_id not in self.dead]  # the host's
        return [a.machine_id for a in victims]


def floor(t: Tree, pool: Pool, agent: BenchAgent, rounds: int, meter: CpuMeter
          ) -> list[float]:
    """One-click replays started by hand on ``agent``: request -> first dispatch."""
    latencies = []
    for _ in range(rounds):
        before = len(agent.reported_at)
        meter.start()
        sent = time.monotonic()
        reply = t.client.call("dispatcher", StartReplay(
            workflow=noop_workflow(1, "click"), machine_id=agent.machine_id,
            mode="autonomous")).body
        assert isinstance(reply, ReplayStarted), reply
        rid = reply.replay_id
        if not pool.run_until(lambda r=rid: r in pool.first_dispatch, 30):
            raise RuntimeError("a replay by hand was not dispatched")
        latencies.append(pool.first_dispatch[rid] - sent)

        # Done once its one report is acked (no status polling: that would be the tree's
        # CPU too); then its status, once, outside the meter.
        if not pool.run_until(lambda n=before: len(agent.reported_at) > n and agent.settled,
                              30):
            raise RuntimeError("a replay by hand did not complete")
        meter.stop()
        s = t.client.call("dispatcher", GetReplayStatus(replay_id=rid)).body
        if not isinstance(s, ReplayStatusReply) or s.replays[0].status != "completed":
            raise RuntimeError(f"a replay by hand ended {s!r}")
    return latencies


def items(t: Tree, queue: str) -> list[dict[str, Any]]:
    reply = t.client.call("dispatcher", ShowQueue(queue=queue, limit=100_000),
                          timeout_s=30).body
    assert isinstance(reply, QueueReply), reply
    return reply.items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000, help="items queued (10000)")
    parser.add_argument("--agents", type=int, default=50, help="bench agents, in two pools")
    parser.add_argument("--floor-rounds", type=int, default=100,
                        help="one-click replays started by hand (100)")
    parser.add_argument("--kill", action="store_true",
                        help="kill -9 the dispatcher and 5 agents a third of the way")
    parser.add_argument("--keep", action="store_true", help="keep the logs and data dir")
    args = parser.parse_args(argv)
    quiet_logs()
    half = args.agents // 2
    pools = {"east": half, "west": args.agents - half}
    with tree(extra_env=FAST_WATCHDOG, keep=args.keep) as t:
        ctx: zmq.Context[object] = zmq.Context()
        pool = Pool(ctx, t.endpoint, {**pools, "manual": 1})
        try:
            if not pool.run_until(lambda: all(a.settled for a in pool.agents), 60):
                raise RuntimeError("the dispatcher did not answer the hellos")
            meter = CpuMeter(t.pids())
            manual = next(a for a in pool.agents if a.machine_id.startswith("manual"))
            floor(t, pool, manual, 10, CpuMeter(t.pids()))  # warm-up
            hand = floor(t, pool, manual, args.floor_rounds, meter)
            hand_cpu = sum(meter.used.values()) / args.floor_rounds
            wf = noop_workflow(1, "click")
            for name in pools:
                reply = t.client.call("dispatcher", CreateQueue(
                    name=name, workflow=wf, pool=name), timeout_s=30).body
                assert isinstance(reply, QueueReply), reply
            per_queue = {name: args.items * n // args.agents for name, n in pools.items()}
            per_queue["west"] += args.items - sum(per_queue.values())
            meter = CpuMeter(t.pids())
            meter.start()
            queued = time.monotonic()
            for name, n in per_queue.items():
                reply = t.client.call("dispatcher", AddItems(queue=name, items=[
                    QueueItemIn(reference=f"{name}-{i:06d}") for i in range(n)]),
                    timeout_s=120).body
                assert isinstance(reply, QueueReply), reply
            queueing_s = time.monotonic() - queued
            killed: list[str] = []

            def finished() -> int:
                return sum(len(a.done) for a in pool.everyone) - args.floor_rounds - 10

            if args.kill:
                pool.run_until(lambda: finished() >= args.items // 3, 600)
                os.kill(t.child_pid("dispatcher"), signal.SIGKILL)
                killed = pool.kill(5)
            final = {"done", "needs_person", "failed", "business_failure", "cancelled"}

            def all_final() -> bool:
                if finished() < args.items - len(killed):
                    return False
                return all(i["state"] in final for q in pools for i in items(t, q))

            if not pool.run_until(all_final, 1800):
                raise RuntimeError("the items did not all end")
            wall = time.monotonic() - queued
            meter.stop()
            results = [i for q in pools for i in items(t, q)]
            ran: dict[str, int] = {}
            for a in pool.everyone:
                for (rid, _aid) in a.done:
                    ran[rid] = ran.get(rid, 0) + 1
            twice = [i["reference"] for i in results if sum(
                ran.get(h["replay_id"], 0) for h in i["history"]
                if h["state"] == "in_progress") > 1]
            states: dict[str, int] = {}
            for i in results:
                states[i["state"]] = states.get(i["state"], 0) + 1
        finally:
            pool.host.close()
            ctx.term()
    queue_cpu = sum(meter.used.values()) / args.items
    print(f"queue_scale: {args.items} items, {args.agents} bench agents in 2 pools, full tree "
          f"(broker + 6 actors){', dispatcher and 5 agents killed -9' if args.kill else ''}")
    print(f"  queueing {args.items} items: {queueing_s:.2f} s (goal < {QUEUEING_GOAL_S:g} s:"
          f" {verdict(queueing_s < QUEUEING_GOAL_S)})")
    print(f"  {args.items / wall:.0f} items/s ({wall:.1f} s from the first add to the last "
          f"item ended); states: {states}")
    print(row("free -> next item's first dispatch", pool.gaps))
    print(row("floor: replay.start by hand -> first dispatch", hand))
    ratio = pct(pool.gaps, 50) / pct(hand, 50)
    cpu_ratio = queue_cpu / hand_cpu
    print(f"  latency p50 ratio {ratio:.1f}x, p99 ratio {pct(pool.gaps, 99) / pct(hand, 99):.1f}x"
          f"; CPU of the tree per item {queue_cpu * 1e6:.0f} µs, per one-click replay by hand "
          f"{hand_cpu * 1e6:.0f} µs: {cpu_ratio:.1f}x (goal <= {OVERHEAD_GOAL:g}x: "
          f"{verdict(cpu_ratio <= OVERHEAD_GOAL)})")
    if args.kill:
        print("  (with --kill the CPU figure misses the killed dispatcher's share: read it "
              "from a run without --kill)")
    print(f"  each item at most once: {verdict(not twice)}"
          + (f" ({len(twice)} ran twice: {twice[:5]})" if twice else ""))
    return 0 if not twice else 1


if __name__ == "__main__":
    sys.exit(main())

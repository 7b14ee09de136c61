#!/usr/bin/env python3
"""Many agents at once: aggregate steps/s and per-step overhead, beside the broker's rate.

``--agents`` bench agents (bench/bench_agent.py: the agent's protocol, no-op actions), hosted
``--per-process`` to a process with one poll loop each, all run a ``--steps``-step replay at
the same time on a full tree (`python run.py`). Steps/s counts first reports, from the first
StartReplay sent to the last report; the per-step overhead is what each agent sees from
sending a report to receiving its next dispatch.

The floor, measured first in the same run: as many echo clients, in as many processes, each
with one request in flight to ONE echo worker through the broker (the dispatcher is one
worker too), as many requests each as there are steps.

Two runs. (1) No-op actions: the most the tree can do. The loop is then closed (each agent
reports as soon as it is dispatched), so by Little's law the mean overhead is agents /
steps-per-second: 200 agents at 1,000 steps/s wait 200 ms a step, and p99 < 100 ms needs more
than 2,000 steps/s. (2) Paced: each action takes ``--paced-ms`` (+-50%) on its agent, as GUI
actions do; the overhead is then measured below saturation (``--paced-ms 0`` skips it).
"""

from __future__ import annotations

import argparse
import json
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zmq
from benchkit import CpuMeter, Tree, noop_workflow, pct, quiet_logs, row, tree, verdict

from messages.base import Message
from messages.codec import Envelope
from messages.replay import (
    GetReplayStatus,
    ReplayStarted,
    ReplayStatusReply,
    StartReplay,
)
from transport.client import CallFailed, Client

TARGET_STEPS_S = 1000.0
TARGET_P99_S = 0.100
BENCH_AGENT = str(Path(__file__).resolve().parent / "bench_agent.py")


def _children(t: Tree, mode: str, counts: list[int], steps: int, action_ms: float,
              timeout_s: float, prefix: str = "bench"
              ) -> list[tuple[subprocess.Popen[bytes], Path]]:
    """Start one child per count; returns once every child has printed "ready"."""
    children = []
    for k, count in enumerate(counts):
        out = t.tmp / f"{prefix}-{mode}-{k}.json"
        proc = t.spawn([sys.executable, BENCH_AGENT, mode, t.endpoint, "--prefix",
                        f"{prefix}-p{k}", "--count", str(count), "--steps", str(steps),
                        "--action-ms", str(action_ms), "--timeout", str(timeout_s),
                        "--out", str(out)], f"{prefix}-{mode}-{k}", stdout=subprocess.PIPE,
                       stdin=subprocess.PIPE)
        children.append((proc, out))
    deadline = time.monotonic() + 60
    for proc, _out in children:
        assert proc.stdout is not None
        remaining = deadline - time.monotonic()
        if not select.select([proc.stdout], [], [], max(0.0, remaining))[0] or \
                proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"a {mode} child did not get ready; see {t.tmp}")
    return children


def _go(children: list[tuple[subprocess.Popen[bytes], Path]]) -> None:
    for proc, _out in children:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()


def _results(t: Tree, children: list[tuple[subprocess.Popen[bytes], Path]],
             timeout_s: float) -> dict[str, Any]:
    merged: dict[str, Any] = {"ok": True, "overheads": [], "reported_at": [], "cpu_s": 0.0}
    deadline = time.monotonic() + timeout_s
    while any(proc.poll() is None for proc, _out in children) and \
            time.monotonic() < deadline:
        t.check()
        time.sleep(0.1)
    for proc, out in children:
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        result = json.loads(out.read_text()) if out.exists() else {"ok": False}
        merged["ok"] = merged["ok"] and code == 0 and result["ok"]
        merged["overheads"] += result.get("overheads", [])
        merged["reported_at"] += result.get("reported_at", [])
        merged["cpu_s"] += result.get("cpu_s", 0.0)
    return merged


def _start_replays(t: Tree, counts: list[int], steps: int,
                   prefix: str) -> tuple[float, list[str]]:
    """Send every StartReplay at once (one client, all outstanding); (sent at, replay ids)."""
    wf = noop_workflow(steps)
    ctx: zmq.Context[Any] = zmq.Context()
    client = Client(ctx, t.door)
    ids: list[str] = []
    errors: list[str] = []

    def started(reply: Envelope[Message] | None, error: CallFailed | None) -> None:
        if reply is not None and isinstance(reply.body, ReplayStarted):
            ids.append(reply.body.replay_id)
        else:
            errors.append(str(error or reply))

    sent_at = time.monotonic()
    for k, count in enumerate(counts):
        for i in range(count):
            client.call("dispatcher", StartReplay(workflow=wf, machine_id=f"{prefix}-p{k}-{i}",
                                                  mode="autonomous"),
                        started, timeout_s=30.0, retries=0)
    while client.outstanding:
        if client.socket.poll(100):
            client.drain()
        client.tick()
    client.close()
    ctx.term()
    if errors:
        raise RuntimeError(f"{len(errors)} replays not started: {errors[:3]}")
    return sent_at, ids


def _run(t: Tree, counts: list[int], steps: int, action_ms: float, prefix: str,
         timeout_s: float) -> dict[str, Any]:
    """One run: agents ready, every replay started at once, served to the end."""
    agents = _children(t, "agents", counts, steps, action_ms, timeout_s, prefix)
    meter = CpuMeter(t.pids())
    meter.start()
    sent_at, ids = _start_replays(t, counts, steps, prefix)
    run = _results(t, agents, timeout_s + 10)
    meter.stop()
    status = t.client.call("dispatcher", GetReplayStatus()).body
    assert isinstance(status, ReplayStatusReply)
    run["completed"] = sum(1 for r in status.replays if r.replay_id in ids
                           and r.status == "completed")
    run["replays"] = len(ids)
    run["steps"] = len(run["reported_at"])
    run["rate"] = run["steps"] / (max(run["reported_at"]) - sent_at)
    run["meter"] = meter
    return run


def _print_run(label: str, run: dict[str, Any], processes: int, floor_rate: float) -> None:
    steps, rate = run["steps"], run["rate"]
    print(f"  {label}: {rate:6.0f} steps/s ({steps} steps, {run['completed']}/{run['replays']}"
          f" replays completed{'' if run['ok'] else ', AGENTS TIMED OUT'})"
          f" = {rate / floor_rate:.3f} x the floor rate")
    print(row("per-step overhead (report -> next)", run["overheads"]))
    print(f"    CPU per step: tree {run['meter'].per_step(steps)}; the {processes} bench agent "
          f"processes {run['cpu_s'] / steps * 1e6:.0f} µs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=200, help="simulated agents (200)")
    parser.add_argument("--steps", type=int, default=50, help="steps per replay (50)")
    parser.add_argument("--per-process", type=int, default=50,
                        help="bench agents hosted per process (50)")
    parser.add_argument("--paced-ms", type=float, default=500.0,
                        help="mean duration of an action in the paced run (500; 0: no run)")
    parser.add_argument("--timeout", type=float, default=90.0,
                        help="seconds for the replays of a run (90)")
    parser.add_argument("--keep", action="store_true", help="keep the logs and data dir")
    args = parser.parse_args(argv)
    quiet_logs()
    counts = [min(args.per_process, args.agents - i)
              for i in range(0, args.agents, args.per_process)]
    begun = time.monotonic()
    with tree(keep=args.keep) as t:
        broker = t.pids()["broker"]
        echo_worker = t.echo_worker()
        floor_cpu = CpuMeter({"broker": broker, "echo worker": echo_worker.pid})
        echo = _children(t, "echo-clients", counts, args.steps, 0, args.timeout)
        floor_start = time.monotonic()
        floor_cpu.start()
        _go(echo)
        floor = _results(t, echo, args.timeout + 10)
        floor_cpu.stop()
        noop = _run(t, counts, args.steps, 0, "noop", args.timeout)
        paced = (_run(t, counts, args.steps, args.paced_ms, "paced", args.timeout)
                 if args.paced_ms > 0 else None)
    requests = len(floor["reported_at"])
    floor_rate = requests / (max(floor["reported_at"]) - floor_start)
    print(f"throughput: {args.agents} bench agents ({len(counts)} processes), {args.steps}-step"
          f" replays each, all at once, full tree (broker + 6 actors), "
          f"{time.monotonic() - begun:.1f} s in all")
    print(f"  floor: {args.agents} echo clients -> broker -> 1 echo worker: {floor_rate:6.0f}"
          f" req/s ({requests} requests)")
    print(row("floor latency (echo round trip)", floor["overheads"]))
    print(f"    floor CPU per request: {floor_cpu.per_step(requests)}; the {len(counts)} client"
          f" processes {floor['cpu_s'] / requests * 1e6:.0f} µs")
    _print_run("(1) no-op actions", noop, len(counts), floor_rate)
    used, steps = noop["meter"].used, noop["steps"]
    capacity = min(steps / used["dispatcher"], 2 * steps / sum(used.values()))
    print(f"    estimate with the agents on their workstations and both cores free: "
          f"{capacity:.0f} steps/s (the lower of 1 core / dispatcher, 2 cores / tree)")
    rate, p99 = noop["rate"], pct(noop["overheads"], 99)
    verdicts = [f">= {TARGET_STEPS_S:.0f} steps/s (1): {verdict(rate >= TARGET_STEPS_S)}",
                f"p99 < {TARGET_P99_S * 1000:.0f} ms (1): {verdict(p99 < TARGET_P99_S)} "
                f"(Little: {args.agents} agents / {rate:.0f} steps/s = "
                f"{args.agents / rate * 1000:.0f} ms mean)"]
    ok = noop["ok"] and noop["completed"] == noop["replays"]
    if paced is not None:
        _print_run(f"(2) paced, {args.paced_ms:g} ms +-50% actions", paced, len(counts),
                   floor_rate)
        paced_p99 = pct(paced["overheads"], 99)
        verdicts.append(f"p99 < {TARGET_P99_S * 1000:.0f} ms (2): "
                        f"{verdict(paced_p99 < TARGET_P99_S)}")
        ok = ok and paced["ok"] and paced["completed"] == paced["replays"]
    print("  targets: " + "; ".join(verdicts))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

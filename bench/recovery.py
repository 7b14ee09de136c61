#!/usr/bin/env python3
"""Recovery times, mid-replay, with the watchdog at its production default (45 s orphans).

(a) kill -9 of the dispatcher (the supervisor's child): from the kill to the agent
    receiving the in-flight action re-sent by the restarted dispatcher
    (``resend_reason = dispatcher_restarted``).
(b) an agent that drops its connections as a killed process would (no DISCONNECT, the
    action it had just received forgotten) and connects again: from its reconnection to
    receiving that action re-sent (``resend_reason = agent_reconnected``), which its
    AgentHello asks for.

One bench agent (bench/bench_agent.py) runs a long replay of no-op ``wait`` steps; each
case is repeated ``--repeat`` times, ``--gap`` steps apart. Target: < 2 s each, i.e. not
the watchdog's 45 s. Floors measured in the same run: the start-up of a Python process
importing the dispatcher (what a restart cannot beat) and the broker round trip.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zmq
from bench_agent import BenchAgent, Host
from benchkit import (
    ROOT,
    Tree,
    broker_round_trips,
    dispatch_sized_body,
    noop_workflow,
    pct,
    quiet_logs,
    tree,
    verdict,
)

from messages.dispatch import DispatchAction
from messages.replay import ReplayStarted, StartReplay

TARGET_S = 2.0
WAIT_S = 60.0  # past the watchdog's 45 s: a miss shows as a figure, not a hang


class Probe:
    """Watches the agent's dispatches for the re-send a recovery must produce."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.action_id: str | None = None
        self.seen_at: float | None = None
        self.crash_next = False
        self.crash_pending: DispatchAction | None = None

    def on_dispatch(self, _agent: BenchAgent, dispatch: DispatchAction, now: float) -> bool:
        if self.crash_next:  # "mid-action": received and acknowledged, never reported
            self.crash_next = False
            self.crash_pending = dispatch
            return False
        meta = dispatch.dispatch_meta
        if self.reason is not None and self.seen_at is None and meta.resend_reason == \
                self.reason and self.action_id in (None, dispatch.action.action_id):
            self.seen_at = now
        return True

    def expect(self, reason: str, action_id: str | None = None) -> None:
        self.reason, self.action_id, self.seen_at = reason, action_id, None


def _serve_steps(host: Host, agent: BenchAgent, steps: int) -> None:
    target = len(agent.reported_at) + steps
    if not host.run_until(lambda: len(agent.reported_at) >= target, WAIT_S):
        raise RuntimeError(f"the replay did not make {steps} steps in {WAIT_S}s")


def _startup_floor(t: Tree, n: int = 3) -> float:
    """Median seconds for a fresh Python to import the dispatcher's code."""
    times = []
    for _ in range(n):
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", "import actors.dispatcher.process"], cwd=ROOT,
                       env=t.env, check=True)
        times.append(time.monotonic() - start)
    return statistics.median(times)


def kill_dispatcher(t: Tree, host: Host, agent: BenchAgent, probe: Probe,
                    gap: int) -> tuple[float, float]:
    """(seconds to the re-sent dispatch, seconds until the new process existed)."""
    _serve_steps(host, agent, gap)
    old = t.child_pid("dispatcher")
    probe.expect("dispatcher_restarted")
    killed_at = time.monotonic()
    os.kill(old, signal.SIGKILL)
    spawned_at: float | None = None
    deadline = killed_at + WAIT_S
    while probe.seen_at is None and time.monotonic() < deadline:
        host.step(0.005)
        if spawned_at is None:
            try:
                if t.child_pid("dispatcher") != old:
                    spawned_at = time.monotonic()
            except LookupError:
                pass
    seen = probe.seen_at if probe.seen_at is not None else float("inf")
    return seen - killed_at, (spawned_at or float("inf")) - killed_at


def reconnect_agent(host: Host, agent: BenchAgent, probe: Probe, gap: int) -> float:
    """Seconds from the agent's reconnection to the action re-sent to it."""
    _serve_steps(host, agent, gap)
    probe.crash_next = True
    if not host.run_until(lambda: probe.crash_pending is not None, WAIT_S):
        raise RuntimeError("no dispatch came to crash on")
    assert probe.crash_pending is not None
    probe.expect("agent_reconnected", probe.crash_pending.action.action_id)
    probe.crash_pending = None
    reconnected_at = agent.crash_and_reconnect()
    host.run_until(lambda: probe.seen_at is not None, WAIT_S)
    seen = probe.seen_at if probe.seen_at is not None else float("inf")
    return seen - reconnected_at


def _line(label: str, values: list[float]) -> str:
    each = " ".join(f"{v:.3f}" for v in values)
    median = statistics.median(values)
    return (f"  {label:<44} median {median:7.3f} s   each: {each}   "
            f"(target < {TARGET_S:g} s: {verdict(max(values) < TARGET_S)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="times each case is run (5)")
    parser.add_argument("--gap", type=int, default=100,
                        help="steps served between two faults (100)")
    parser.add_argument("--keep", action="store_true", help="keep the logs and data dir")
    args = parser.parse_args(argv)
    quiet_logs()
    begun = time.monotonic()
    probe = Probe()
    with tree(keep=args.keep) as t:
        t.echo_worker()
        startup = _startup_floor(t)
        rtts = broker_round_trips(t.endpoint, 500, dispatch_sized_body())
        ctx: zmq.Context[object] = zmq.Context()
        agent = BenchAgent(ctx, t.endpoint, "bench-recovery", on_dispatch=probe.on_dispatch)
        host = Host([agent], t.check)
        try:
            host.run_until(lambda: agent.settled, 30)
            reply = t.client.call("dispatcher", StartReplay(
                workflow=noop_workflow(10_000), machine_id=agent.machine_id,
                mode="autonomous")).body
            assert isinstance(reply, ReplayStarted), reply
            restarts = [kill_dispatcher(t, host, agent, probe, args.gap)
                        for _ in range(args.repeat)]
            reconnects = [reconnect_agent(host, agent, probe, args.gap)
                          for _ in range(args.repeat)]
        finally:
            host.close()
            ctx.term()
    print(f"recovery: 1 bench agent mid-replay, full tree, watchdog orphan timeout at its "
          f"45 s default, {args.repeat} runs each, {time.monotonic() - begun:.1f} s in all")
    print(f"  floors: python start-up importing the dispatcher {startup:.3f} s (median of 3);"
          f" broker round trip p50 {pct(rtts, 50) * 1000:.3f} ms")
    print(_line("(a) kill -9 dispatcher -> re-sent dispatch", [r[0] for r in restarts]))
    print("      of which kill -> new dispatcher process: "
          + " ".join(f"{r[1]:.3f}" for r in restarts) + " s")
    print(_line("(b) agent reconnects -> re-sent action", reconnects))
    return 0


if __name__ == "__main__":
    sys.exit(main())

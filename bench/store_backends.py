#!/usr/bin/env python3
"""The dispatcher on SQLite and on PostgreSQL, in one run: per-step overhead and steps/s;
then the takeover of a standby dispatcher and the failover of a broker pair.

For each store (SQLite in the data directory; PostgreSQL with ``LEA_DATABASE_URL``) a full
tree (`python run.py`) runs, with bench agents (bench/bench_agent.py: the agent's protocol,
no-op ``wait`` actions): (1) one agent, ``--rounds`` replays of ``--steps`` steps: the
per-step overhead it sees, from sending its report to receiving the next dispatch (each
step waits for its turn's COMMIT); (2) ``--agents`` agents at once, one replay each:
steps/s, from the first StartReplay to the last report (a turn's COMMIT is shared by the
reports it holds). The floor, in each tree: the broker round trip to an echo worker.

PostgreSQL: ``--database-url`` (a database of the bench's own: it leaves its replays
there), else a throwaway server of Debian's binaries on a free port (tests/postgres.py),
``fsync`` and ``synchronous_commit`` on, on this machine's disk like the SQLite file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchkit as kit
import zmq
from bench_agent import BenchAgent, Host
from turnaround import run_replay

from messages.events import DISPATCHER_ROLE
from messages.replay import ReplayStarted, StartReplay
from transport.bus import Subscriber


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[str]:
    """``url``, or a throwaway server's database."""
    if url:
        yield url
        return
    sys.path.insert(0, str(kit.ROOT))
    from tests.postgres import Cluster

    with tempfile.TemporaryDirectory(prefix="lea-bench-pg-") as logs:
        cluster = Cluster(Path(logs))
        try:
            cluster.start()
            yield cluster.create_database("bench")
        finally:
            cluster.close()


class Result(NamedTuple):
    overheads: list[float]  # one agent: report -> next dispatch, seconds
    rtts: list[float]  # broker round trips, seconds
    steps_s: float  # many agents at once
    cpu: str  # the dispatcher's CPU per step


def measure(t: kit.Tree, steps: int, rounds: int, agents: int) -> Result:
    """Overheads of one agent, then steps/s of ``agents`` at once, in tree ``t``."""
    t.echo_worker()
    body = kit.dispatch_sized_body()
    meter = kit.CpuMeter({"dispatcher": t.child_pid("dispatcher")})
    ctx: zmq.Context[object] = zmq.Context()
    one = BenchAgent(ctx, t.endpoint, "bench-one")
    many = [BenchAgent(ctx, t.endpoint, f"bench-{k}") for k in range(agents)]
    host = Host([one, *many], t.check)
    rtts: list[float] = []
    try:
        if not host.run_until(lambda: one.settled and all(a.settled for a in many), 60):
            raise RuntimeError("the dispatcher did not answer the hellos")
        run_replay(t, host, one, 20, "wait", 60)  # warm-up, not counted
        one.overheads.clear()
        for _ in range(rounds):
            rtts += kit.broker_round_trips(t.endpoint, 200, body)
            run_replay(t, host, one, steps, "wait", 120, meter)
        started = time.monotonic()
        for agent in many:
            reply = t.client.call("dispatcher", StartReplay(
                workflow=kit.noop_workflow(steps), machine_id=agent.machine_id,
                mode="autonomous")).body
            assert isinstance(reply, ReplayStarted), reply
        if not host.run_until(lambda: all(len(a.reported_at) >= steps and a.settled
                                          for a in many), 300):
            raise RuntimeError("the concurrent replays did not finish")
        last = max(a.reported_at[-1] for a in many)
    finally:
        host.close()
        ctx.term()
    return Result(one.overheads, rtts, agents * steps / (last - started),
                  meter.per_step(rounds * steps))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100, help="steps per replay (100)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="replays of the single agent, each after a round-trip block (10)")
    parser.add_argument("--agents", type=int, default=50,
                        help="agents running one replay each at once (50)")
    parser.add_argument("--takeovers", type=int, default=5,
                        help="kill -9's of the leader of two dispatchers (5; 0: none)")
    parser.add_argument("--broker-kills", type=int, default=6,
                        help="kill -9's of the active broker of a pair (bench/failover.py; "
                             "6; 0: none)")
    parser.add_argument("--broker-heartbeat-ms", type=int, default=500,
                        help="the pair's heartbeat (500: the two-server examples' setting)")
    parser.add_argument("--database-url", default="",
                        help="PostgreSQL to use (default: a throwaway server of our own)")
    args = parser.parse_args(argv)
    kit.quiet_logs()
    results: dict[str, Result] = {}
    with kit.tree() as t:
        results["SQLite"] = measure(t, args.steps, args.rounds, args.agents)
    with postgres(args.database_url) as url, kit.tree(extra_env={"LEA_DATABASE_URL": url}) as t:
        results["PostgreSQL"] = measure(t, args.steps, args.rounds, args.agents)
    print(f"store backends: full tree (broker + 6 actors), no-op 'wait' steps; 1 agent x "
          f"{args.rounds} replays x {args.steps} steps, then {args.agents} agents x "
          f"{args.steps} steps at once")
    for name, r in results.items():
        overheads, rtts = r.overheads, r.rtts
        print(f"{name}:")
        print(kit.row("broker round trip (echo worker)", rtts))
        print(kit.row("per-step overhead (report -> next)", overheads))
        ratio = kit.pct(overheads, 50) / kit.pct(rtts, 50)
        print(f"  ratio p50 overhead / p50 round trip: {ratio:.1f}x;"
              f" {args.agents} agents at once: {r.steps_s:,.0f} steps/s; dispatcher CPU "
              f"per step (1 agent): {r.cpu}")
    sqlite, pg = results["SQLite"], results["PostgreSQL"]
    print(f"PostgreSQL / SQLite: overhead p50 "
          f"{kit.pct(pg.overheads, 50) / kit.pct(sqlite.overheads, 50):.2f}x, "
          f"steps/s {pg.steps_s / sqlite.steps_s:.2f}x")
    if args.takeovers:
        with postgres(args.database_url) as url, \
                kit.tree(extra_env={"LEA_DATABASE_URL": url}) as t:
            restarts, takeovers = takeover(t, args.takeovers)
        print(f"two dispatchers on PostgreSQL, kill -9 of the leader, {args.takeovers} times "
              "(until a ping of the dispatcher service is answered):")
        print(kit.row("floor: restarted by the supervisor", restarts))
        print(kit.row("the standby takes over", takeovers))
    if args.broker_kills:
        import failover  # bench/failover.py: the broker pair's own bench, in this same run

        return failover.main(["--kills", str(args.broker_kills),
                              "--heartbeat-ms", str(args.broker_heartbeat_ms)])
    return 0


def answered_by_another(t: kit.Tree, killed: int, limit_s: float = 60) -> float:
    """Seconds until a process other than ``killed`` answers the dispatcher's pings."""
    start = time.monotonic()
    while t.pid("dispatcher", 0.2) in (None, killed):
        t.check()
        if time.monotonic() - start > limit_s:
            raise RuntimeError(f"no dispatcher answers {limit_s}s after the kill")
    return time.monotonic() - start


def takeover(t: kit.Tree, rounds: int) -> tuple[list[float], list[float]]:
    """kill -9 of the dispatcher alone (the floor: the supervisor restarts it), then of the
    leader of two (a second dispatcher of the bench's, a standby, takes over; the one killed
    comes back a standby: the supervisor's, or the bench's own started again)."""
    restarts: list[float] = []
    for _ in range(rounds):
        pid = t.child_pid("dispatcher")
        os.kill(pid, signal.SIGKILL)
        restarts.append(answered_by_another(t, pid))
    ctx: zmq.Context[Any] = zmq.Context()
    roles = Subscriber(ctx, t.env["LEA_BUS_OUT_ENDPOINT"], DISPATCHER_ROLE)
    argv = [sys.executable, "-m", "actors", "dispatcher"]
    second = t.spawn(argv, "dispatcher-2")
    takeovers: list[float] = []
    try:
        for _ in range(rounds):
            standby_is_up(roles, t)
            leader = t.pid("dispatcher")
            assert leader is not None
            os.kill(leader, signal.SIGKILL)
            takeovers.append(answered_by_another(t, leader))
            if leader == second.pid:
                second.wait()
                second = t.spawn(argv, "dispatcher-2")
    finally:
        roles.close()
        ctx.term()
    return restarts, takeovers


def standby_is_up(roles: Subscriber, t: kit.Tree, limit_s: float = 60) -> None:
    """Until a standby that is alive, and does not lead since, says so
    (``lea:dispatcher_role``)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        t.check()
        event = roles.recv(timeout_s=0.5)
        if event is not None and event.data.get("role") == "standby":
            pid = int(event.data["pid"])
            if _alive(pid) and pid != t.pid("dispatcher"):
                return
    raise RuntimeError(f"no standby dispatcher after {limit_s}s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Failover time across two servers (docs/two-servers.md, "Running on two servers"). Needs root.

The hosts of examples/two-servers/ as network namespaces on this machine
(tests/integration/two_servers.py): PostgreSQL on its own host, a whole tree on each server
from its example file, one real agent (`python -m agent`) on a workstation replaying a long
workflow of clicks. Each round takes the active server's link down (its cable pulled) and
measures, from the cut, the time until the agent performs its second input after it (the
first may have been dispatched before the cut; the second needed the other server's broker
and dispatcher: the broker pair's expiry and, at the same time, the end of the cut-off
leader's lease (actors/dispatcher/store/lease.py), then loading the replays). The link then comes
back (that server stays passive) and the next round cuts the other one. The floor, in the
same run: the time between two inputs in a row without failover.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import ms, quiet_logs

from agent.effects import read_effects
from tests.integration.system import clicks, workflow
from tests.integration.two_servers import example, two_servers

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 120.0


class Procs:
    """Processes started for the bench, each logging to a file; all stopped by close."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def __call__(self, argv: list[str], env: dict[str, str] | None = None,
                 name: str = "proc") -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}-{len(self.procs)}.log", "wb") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=ROOT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def inputs(path: Path) -> int:
    return len(read_effects(path))


def wait_more(path: Path, than: int) -> float:
    """Until the agent performed more than ``than`` inputs; the perf_counter time then."""
    deadline = time.perf_counter() + WAIT_S
    while inputs(path) <= than:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"no input past {than} in {WAIT_S}s")
        time.sleep(0.005)
    return time.perf_counter()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="cuts (4), A and B in turn")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    quiet_logs()
    tmp = Path(tempfile.mkdtemp(prefix="lea-2s-"))
    procs = Procs(tmp)
    try:
        with two_servers(procs, tmp) as servers:
            made, ws = servers.made, servers.ws
            brokers = dict(zip(("a", "b"), ws.brokers, strict=True))
            folder = ws.agent("w0")
            ws.wait_ready("w0")
            wf = workflow(*clicks(5000))
            ws.start(wf, "w0")
            log = folder / "effects.jsonl"
            stamps = [wait_more(log, n) for n in range(21)]
            floor = [b - a for a, b in itertools.pairwise(stamps)]
            active, times = "a", []
            for _ in range(args.rounds):
                other = "b" if active == "a" else "a"
                count = inputs(log)
                made.cut(active)
                cut = time.perf_counter()
                wait_more(log, count)
                times.append(wait_more(log, count + 1) - cut)
                print(f"cut {active}: second input after it in {ms(times[-1])}", flush=True)
                made.mend(active)
                deadline = time.monotonic() + WAIT_S
                while not (ws.state(brokers[active]) == "passive"
                           and ws.state(brokers[other]) == "active"):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{active} back: not passive beside {other}")
                    time.sleep(0.1)
                wait_more(log, inputs(log) + 2)  # going on through the other server
                active = other
            done = [e["action_id"] for e in read_effects(log)]
            twice = len(done) - len(set(done))
        shutil.rmtree(tmp)  # kept (the processes' logs) when the bench failed
    finally:
        procs.close()
        if tmp.exists():
            print(f"logs: {tmp}", file=sys.stderr)
    heartbeat = example("server-a").heartbeat_interval_ms
    print(f"two servers, {args.rounds} cuts of the active server's link, one agent "
          f"(heartbeat {heartbeat} ms, as in the example files):")
    print(f"  cut -> second input after it: median {ms(statistics.median(times))}, "
          f"max {ms(max(times))}")
    print(f"  floor: one step without failover, median {ms(statistics.median(floor))}")
    print(f"  inputs performed twice: {twice}")
    return 0 if twice == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

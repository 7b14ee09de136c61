#!/usr/bin/env python3
"""How long ``python run.py`` takes to serve, and the CPU its processes spend on it.

    python bench/tree_start.py [--runs N]

Each run starts a tree on free ports (benchkit.Tree), waits until every actor answers a
ping through the broker, and sums the CPU its processes (supervisor, broker, six actors)
used until then. Floor, in the same run: eight bare Python interpreters started at once
(``python -c pass``), the least eight processes on these cores can cost. What a tree's
start costs matters to a restart and to the test suite, which starts a tree per test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import Tree, cpu_s, quiet_logs

PROCESSES = 8  # the supervisor, the broker and the six actors


def bare_pythons() -> float:
    """Seconds for ``PROCESSES`` bare interpreters started at once to have all exited."""
    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(PROCESSES)]
    for proc in procs:
        proc.wait()
    return time.monotonic() - start


def one_start() -> tuple[float, float]:
    """(seconds until every actor answers, CPU seconds of the tree's processes by then)."""
    tree = Tree()
    try:
        ready = tree.wait_ready()
        return ready, sum(cpu_s(pid) for pid in tree.pids().values())
    finally:
        tree.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    quiet_logs()
    load_before = os.getloadavg()[0]
    starts, cpus, floors = [], [], []
    for _ in range(args.runs):
        floors.append(bare_pythons())
        ready, cpu = one_start()
        starts.append(ready)
        cpus.append(cpu)
    start, floor = statistics.median(starts), statistics.median(floors)
    print(f"{args.runs} starts; load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")
    print(f"  every actor serving: p50 {start:.2f} s (max {max(starts):.2f} s); CPU of the "
          f"tree's {PROCESSES} processes by then: p50 {statistics.median(cpus):.2f} s")
    print(f"  floor: {PROCESSES} bare Pythons at once p50 {floor:.2f} s; ratio "
          f"{start / floor:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

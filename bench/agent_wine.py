#!/usr/bin/env python3
"""Per-action overhead of the Windows agent (Windows CPython 3.11 under Wine, run from the
folder cli/bundle.py builds) beside the Linux agent, on one tree, in the same run.

Two real agents (``python -m agent``, simulated executor, no delay) serve replays of no-op
``click`` steps in turn, round after round, so that the machine's noise hits both alike.
Figures come from each agent's own ledger (fsync'd marks, clock of the same machine):

- cycle: from one step marked *started* to the next: everything a step costs the replay
  (the dispatch, the claim, the ledger's fsync'd marks, the report and its ack, the
  dispatcher's turn);
- in the agent: *started* to *finished*: the agent's own work on one step (claim round
  trip included), what Wine and the Windows build change.

The Linux agent is the floor. Needs Wine (``bash scripts/test`` installs it; the cache of
tests/wine.py is reused). Not a test: it prints, it asserts nothing about durations.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import ROOT, Tree, noop_workflow, pct, quiet_logs, row

sys.path.insert(0, str(ROOT))
from messages.replay import GetReplayStatus, ReplayStarted, ReplayStatusReply, StartReplay
from tests.wine import make_bundle, make_wine, windows_path, wine_problem

LEDGER_CAPACITY = 256  # agent/protocol/ledger.py's default: a run stays below it


def run_replay(t: Tree, machine_id: str, steps: int, round_no: int, timeout_s: float) -> None:
    wf = noop_workflow(steps, "click", workflow_id=f"bench-{round_no}")
    reply = t.client.call("dispatcher", StartReplay(workflow=wf, machine_id=machine_id,
                                                    mode="autonomous")).body
    assert isinstance(reply, ReplayStarted), reply
    deadline = time.monotonic() + timeout_s
    while True:
        t.check()
        status = t.client.call("dispatcher", GetReplayStatus(replay_id=reply.replay_id)).body
        assert isinstance(status, ReplayStatusReply)
        if status.replays[0].status != "running":
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{machine_id}: replay not done in {timeout_s}s")
        time.sleep(0.1)
    if status.replays[0].status != "completed":
        raise RuntimeError(f"{machine_id}: replay ended {status.replays[0].status}")


def ledger_figures(path: Path) -> tuple[list[float], list[float]]:
    """``(cycles, in_agent)`` in seconds, per replay, from a ledger file."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT replay_id, started_at, finished_at FROM actions"
                          " WHERE answered_by IS NULL ORDER BY seq").fetchall()
    cycles = [b[1] - a[1] for a, b in pairwise(rows) if a[0] == b[0]]
    in_agent = [finished - started for _r, started, finished in rows if finished]
    return cycles, in_agent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="steps per replay (40)")
    parser.add_argument("--rounds", type=int, default=5, help="replays per agent (5)")
    args = parser.parse_args(argv)
    if args.steps * args.rounds >= LEDGER_CAPACITY:
        parser.error(f"steps x rounds must stay below {LEDGER_CAPACITY} (the ledger's bound)")
    if (problem := wine_problem()) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    quiet_logs()
    started = time.monotonic()
    # A busy machine starts the tree slowly: patience rather than hung children killed.
    # The loop detector off: the simulated screen never changes, which is its screen_static
    # (and it is the tree's cost, the same for both agents).
    t = Tree(extra_env={"LEA_BEACON_TIMEOUT_S": "60", "RPA_LOOP_DETECTOR_ENABLED": "0"})
    with tempfile.TemporaryDirectory(prefix="lea-bench-wine-") as tmp_name, \
            contextlib.closing(t):
        t.wait_ready(timeout=300)
        tmp = Path(tmp_name)
        wine = make_wine(tmp)
        try:
            bundle = make_bundle(tmp / "lea-agent", wine)
            scenario = tmp / "scenario.json"
            scenario.write_text(json.dumps({}))
            linux_dir, wine_dir = tmp / "linux-agent", tmp / "wine-agent"
            t.spawn([sys.executable, "-m", "agent", "--machine-id", "bench-linux",
                     "--data-dir", str(linux_dir)], "agent-linux")
            lea = {k: v for k, v in t.env.items() if k.startswith("LEA_")}
            wine.popen(bundle.python("-m", "agent", "--machine-id", "bench-wine",
                                     "--data-dir", windows_path(wine_dir)),
                       t.tmp / "agent-wine.log", env=wine.env(PYTHONUNBUFFERED="1", **lea))
            t.wait_registered("agent.bench-linux")
            t.wait_registered("agent.bench-wine", timeout=120)
            for machine in ("bench-linux", "bench-wine"):  # warm-up, not counted
                run_replay(t, machine, 5, -1, 120)
            for round_no in range(args.rounds):
                for machine in ("bench-linux", "bench-wine"):
                    run_replay(t, machine, args.steps, round_no, 300)
        finally:
            wine.close()
        linux = ledger_figures(linux_dir / "ledger.sqlite3")
        windows = ledger_figures(wine_dir / "ledger.sqlite3")
    print(f"agent_wine: {args.rounds} replays x {args.steps} no-op 'click' steps per agent,"
          f" in turn, one tree (broker + 6 actors); {time.monotonic() - started:.0f} s in all")
    print(" cycle, step started -> next step started:")
    print(row("Linux agent (floor)", linux[0]))
    print(row("Windows agent under Wine", windows[0]))
    print(" in the agent, step started -> finished (ledger marks):")
    print(row("Linux agent (floor)", linux[1]))
    print(row("Windows agent under Wine", windows[1]))
    print(f"  ratio p50 Wine / Linux: cycle {pct(windows[0], 50) / pct(linux[0], 50):.2f}x,"
          f" in the agent {pct(windows[1], 50) / pct(linux[1], 50):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

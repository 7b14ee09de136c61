#!/usr/bin/env python3
"""Failover time of a broker pair (docs/operations.md, "A broker pair").

A full tree (`python run.py`) whose broker is the primary, a second broker process as the
backup, and one simulated agent (`python -m agent`, the real one) given both endpoints,
replaying a long workflow of clicks. Each round kill -9's the broker that is active: the
tree's one (the supervisor restarts it, as a passive) and the backup (restarted by the bench)
in turn. The failover time is from the kill to the second input the agent performs after it:
the first may have been dispatched before the kill, the second needed its report and its
dispatch through the other broker. The floor, measured in the same run, is one step without
failover: the time between two inputs in a row. Target: median < 3 s. The kills of the
backup show a dead host (nothing restarts it before the failover); the primary's supervisor
restarts it at once, and the backup takes over on hearing it restart (sooner than the
expiry).

``--whole-trees``: as on two servers (docs/two-servers.md, "Running on two servers"), a whole
tree on each side, the primary's and the backup's, on one throwaway PostgreSQL
(``--database-url`` for your own): each tree's actors reach only their own broker, and each kill
is of the active tree's broker (its supervisor restarts it). Besides the time to the second
input, each round prints when the inputs came back at their normal pace (the first input from
which :data:`PACE_RUN` steps in a row each took at most :data:`PACE_SLACK` x the floor's p90
step) and how many clicks after the kill went without a monitor resolution
(``router_unavailable``): none should, as the agent finds a click's monitor itself
(docs/screens-and-pauses.md); the count stays as a guard against a dispatcher that asks the
router again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import Tree, free_port, pct, quiet_logs, row, verdict
from store_backends import postgres

from actors import ACTORS
from messages.replay import ReplayStarted, StartReplay
from messages.workflow import Workflow
from tests.integration.broker_pair import broker_state, pair_env
from transport.client import SyncClient

TARGET_S = 3.0
WAIT_S = 60.0
PACE_RUN = 10
"""Steps in a row at the floor's pace that make the pace normal again."""
PACE_SLACK = 2.0
"""A step at normal pace takes at most this times the floor's p90 step."""


def clicks_workflow(steps: int) -> Workflow:
    """Clicks at places in turn (one place thrice in a row would be a loop)."""
    return Workflow.model_validate({"workflow_id": "failover", "actions": [
        {"action_id": f"s{i}", "type": "click",
         "target_spec": {"x_pct": 0.5, "y_pct": round(0.05 + 0.9 * (i % 97) / 97, 4)}}
        for i in range(steps)]})


class Effects:
    """The agent's effects log (one line per input performed), read as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def count(self) -> int:
        try:
            return self.path.read_bytes().count(b"\n")
        except FileNotFoundError:
            return 0

    def wait_more(self, than: int, timeout_s: float = WAIT_S) -> float:
        """Until more than ``than`` lines; the perf_counter time it was seen."""
        deadline = time.perf_counter() + timeout_s
        while self.count() <= than:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"no input past {than} in {timeout_s}s")
            time.sleep(0.002)
        return time.perf_counter()

    def lines(self) -> list[dict[str, Any]]:
        text = self.path.read_text() if self.path.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def action_ids(self) -> list[str]:
        return [line["action_id"] for line in self.lines()]


def back_at_pace(times: list[float], since: float, step_s: float) -> float:
    """Seconds from ``since`` to the first of ``times`` (inputs after it, in order) from
    which :data:`PACE_RUN` steps in a row each took at most ``step_s``; nan if none."""
    for i in range(len(times) - PACE_RUN):
        if all(times[j + 1] - times[j] <= step_s for j in range(i, i + PACE_RUN)):
            return times[i] - since
    return float("nan")


def wait_state(endpoint: str, state: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while (said := broker_state(endpoint)) is None or said["state"] != state:
        if time.monotonic() > deadline:
            raise RuntimeError(f"broker {endpoint} not {state} after {timeout_s}s: {said}")
        time.sleep(0.05)


class LoneBackup:
    """The tree's broker the primary, a broker process alone the backup (the tree's actors
    given both doors); kills the primary (restarted by its supervisor) and the backup (left
    down until the round is over) in turn."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.a = f"tcp://127.0.0.1:{free_port()}"
        tree_env, backup_env = pair_env({"LEA_MDP_ENDPOINT": self.a}, tmp)
        self.tree = Tree(extra_env={**tree_env, "LEA_MDP_ENDPOINT": self.a}, keep=args.keep,
                         heartbeat_ms=args.heartbeat_ms)
        self.tree.endpoint = self.a
        self.backup_env = {**self.tree.env, **backup_env}
        self.b = self.backup_env["LEA_MDP_ENDPOINT"]
        self.backup = self._start_backup()
        self.tree.client.close()
        # Starts and status speak for people: through each side's tree door.
        self.tree.client = SyncClient([tree_env["LEA_TREE_ENDPOINT"],
                                       backup_env["LEA_TREE_ENDPOINT"]])
        self.tree.wait_ready()

    def _start_backup(self) -> subprocess.Popen[bytes]:
        return self.tree.spawn([sys.executable, "-m", "broker"], "broker-b", env=self.backup_env)

    def kill(self, i: int) -> str:
        if i % 2 == 0:  # the tree's broker is active on even rounds
            os.kill(self.tree.child_pid("broker"), signal.SIGKILL)
            return "primary"
        self.backup.send_signal(signal.SIGKILL)
        return "backup (left down)"

    def restore(self, i: int) -> None:
        """Both back, the other one active, before the next round."""
        if i % 2 == 0:
            wait_state(self.b, "active")
            wait_state(self.a, "passive")
        else:
            self.backup.wait()
            self.backup = self._start_backup()
            wait_state(self.a, "active")
            wait_state(self.b, "passive")

    def close(self) -> None:
        if self.backup.poll() is None:
            self.backup.terminate()
            self.backup.wait(10)
        self.tree.close()


class WholeTrees:
    """A whole tree on each side (docs/two-servers.md, "Running on two servers"), one
    PostgreSQL; each tree's actors reach only their own broker. Kills the active tree's broker
    (restarted by its supervisor), the primary's and the backup's in turn."""

    def __init__(self, args: argparse.Namespace, tmp: Path, database_url: str) -> None:
        self.a, self.b = (f"tcp://127.0.0.1:{free_port()}" for _ in "ab")
        state_a, state_b = (f"tcp://127.0.0.1:{free_port()}" for _ in "ab")

        def side(role: str, own: str, other: str, state: str, peer: str, door: str,
                 ) -> dict[str, str]:
            return {"LEA_DATABASE_URL": database_url, "LEA_BROKER_ROLE": role,
                    "LEA_MDP_ENDPOINT": own, "LEA_MDP_BACKUP_ENDPOINT": other,
                    "LEA_BROKER_STATE_ENDPOINT": state, "LEA_BROKER_PEER_STATE_ENDPOINT": peer,
                    "LEA_TREE_ENDPOINT": f"ipc://{tmp}/{door}.sock",
                    # The simulated agent's screens barely change: the loop detector of the
                    # side that takes over, which saw none of the earlier ones, may pause
                    # the replay as stuck (screen_static) and end the bench.
                    "RPA_LOOP_DETECTOR_ENABLED": "0"}

        self.tree = Tree(side("primary", self.a, self.b, state_a, state_b, "a"),
                         keep=args.keep, heartbeat_ms=args.heartbeat_ms)
        self.tree.endpoint = self.a
        self.other = Tree(side("backup", self.b, self.a, state_b, state_a, "b"),
                          keep=args.keep, heartbeat_ms=args.heartbeat_ms)
        self.tree.client.close()
        self.tree.client = SyncClient([f"ipc://{tmp}/a.sock", f"ipc://{tmp}/b.sock"])
        self.tree.wait_ready()
        wait_state(self.b, "passive")
        # The backup's tree is up when each of its actors has started (none can answer
        # while its broker is passive).
        deadline = time.monotonic() + WAIT_S
        while len(self.other.pids()) < len(ACTORS) + 2:
            self.other.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the backup's tree did not start; see {self.other.tmp}")
            time.sleep(0.1)

    def kill(self, i: int) -> str:
        os.kill((self.other if i % 2 else self.tree).child_pid("broker"), signal.SIGKILL)
        return "backup's tree" if i % 2 else "primary's tree"

    def restore(self, i: int) -> None:
        active, passive = (self.a, self.b) if i % 2 else (self.b, self.a)
        wait_state(active, "active")
        wait_state(passive, "passive")

    def close(self) -> None:
        self.other.close()
        self.tree.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=6, help="kill -9 of the active broker")
    parser.add_argument("--heartbeat-ms", type=int, default=1000,
                        help="LEA_HEARTBEAT_INTERVAL_MS (the production default: 1000)")
    parser.add_argument("--floor-steps", type=int, default=20,
                        help="steps timed before each kill (the floor)")
    parser.add_argument("--whole-trees", action="store_true",
                        help="a whole tree on each side, on PostgreSQL (module docstring)")
    parser.add_argument("--database-url", help="with --whole-trees: a database of your own")
    parser.add_argument("--keep", action="store_true", help="keep logs and data")
    args = parser.parse_args(argv)
    quiet_logs()
    tmp = Path(tempfile.mkdtemp(prefix="lea-bench-pair-"))
    try:
        if args.whole_trees:
            with postgres(args.database_url) as url:
                return run(args, WholeTrees(args, tmp, url))
        return run(args, LoneBackup(args, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the doors too


def run(args: argparse.Namespace, pair: LoneBackup | WholeTrees) -> int:
    t = pair.tree
    agent: subprocess.Popen[bytes] | None = None
    floor: list[float] = []
    failovers: list[float] = []
    paces: list[float] = []
    unrouted = 0
    try:
        wait_state(pair.a, "active")
        wait_state(pair.b, "passive")
        effects = Effects(t.tmp / "effects.jsonl")
        scenario = t.tmp / "scenario.json"
        scenario.write_text(json.dumps({"default": {"delay_s": 0.0}}))
        agent = t.spawn([sys.executable, "-m", "agent", "--machine-id", "m0", "--data-dir",
                         str(t.tmp / "agent"), "--effects-log", str(effects.path),
                         "--scenario", str(scenario)], "agent", env=t.env)
        t.wait_registered("agent.m0")
        steps = (args.kills + 2) * (args.floor_steps + PACE_RUN + 60) + 200
        reply = t.client.call("dispatcher", StartReplay(
            workflow=clicks_workflow(steps), machine_id="m0", mode="autonomous"),
            timeout_s=10).body
        assert isinstance(reply, ReplayStarted), reply
        for i in range(args.kills):
            # The floor: one step after another, no failover.
            seen = effects.wait_more(effects.count())
            for _ in range(args.floor_steps):
                now = effects.wait_more(effects.count())
                floor.append(now - seen)
                seen = now
            before = effects.count()
            start, killed_at = time.perf_counter(), time.time()
            which = pair.kill(i)
            failovers.append(effects.wait_more(before + 1) - start)
            # Enough inputs after it to see the pace come back.
            while effects.count() < before + PACE_RUN + 40:
                effects.wait_more(effects.count())
            after = effects.lines()[before:]
            paces.append(back_at_pace([line["at"] for line in after], killed_at,
                                      PACE_SLACK * pct(floor, 90)))
            unrouted += sum(line.get("monitor") == "router_unavailable" for line in after)
            print(f"  kill {i + 1}: {which} -> 2nd input {failovers[-1]:.3f} s, normal pace "
                  f"{paces[-1]:.3f} s", flush=True)
            pair.restore(i)
        done = effects.action_ids()
        twice = len(done) - len(set(done))
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            agent.wait(10)
        pair.close()

    what = "a whole tree on each side" if args.whole_trees else "a lone backup broker"
    print(f"broker pair failover ({what}), heartbeat {args.heartbeat_ms} ms, "
          f"{args.kills} kill -9 of the active broker (primary and backup in turn):")
    print(row("floor: one step, no failover", floor))
    print(row("failover: kill -> 2nd input after", failovers))
    # The primary's supervisor restarts it at once, and its peer takes over on hearing it
    # restart; a lone backup is left down, as a dead host would be: its peer waits the expiry.
    print(row("  of which the primary killed", failovers[0::2]))
    print(row("  of which the backup killed", failovers[1::2]))
    print(row("kill -> inputs at normal pace again", paces))
    median, pace = statistics.median(failovers), statistics.median(paces)
    print(f"  median failover {median:.3f} s = {median / statistics.median(floor):.0f}x the "
          f"step, p90 {pct(failovers, 90):.3f} s; normal pace again: median {pace:.3f} s, "
          f"max {max(paces):.3f} s; target < {TARGET_S:g} s: "
          f"{verdict(max(paces) < TARGET_S)}; clicks without the router's answer after the "
          f"kills: {unrouted}; inputs performed twice: {twice}")
    return 0 if twice == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

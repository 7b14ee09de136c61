"""Power cuts (docs/durability.md): the server's data directory and the workstations' on PowerFS
(tests/powerfs.py, validated by test_powerfs.py), which keeps what is not fsync'ed in a cache
and drops it at a cut. Concurrent replays with real agents; at random moments the power goes
off on the server (every process of the tree kill -9'd at once, then the disk loses what was
not fsync'ed, then the tree starts again on what survived) or on the workstations (every
agent, then their disk). The agents' effects logs stand for the world (the screen): they are
on a real disk, outside any cut.

Once quiet: every input ran exactly once (the effects logs, test_chaos.check_end_state); every
input that ran has its dispatch (its attempt) and an accepted report in the trail; no record
a sender had acknowledged is missing (each sender's rows, epoch by epoch, without a gap) and
no id names two records (no ``record_conflict``); ``audit verify`` passes with every anchor
taken before a cut. Reproduce a run's random choices with ``LEA_CHAOS_SEED=<seed>``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from actors import ACTORS
from messages.audit import AuditHead, GetAuditHead
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration import trail_checks as trail
from tests.integration.system import System
from tests.integration.test_chaos import (
    Chaos,
    Session,
    chaos_scenario,
    chaos_workflow,
    check_end_state,
)
from tests.powerfs import Disk

WORKSTATION_CUT_P = 0.3  # share of the cuts that hit the workstations instead of the server


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[tuple[Disk, Disk]]:
    server, workstations = Disk(tmp_path / "server-disk"), Disk(tmp_path / "ws-disk")
    try:
        yield server, workstations
    finally:
        server.close()
        workstations.close()


def power_off(pid: int) -> None:
    """``pid`` and every process under it lose power at once: all frozen first (none goes on
    writing, nor restarts another, while the others die), then killed; waits for them."""
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(sig)
    psutil.wait_procs(procs, timeout=30)


class PowerCuts:
    """The cuts, and what was known before each one."""

    def __init__(self, spawn: Spawn, chaos: Chaos, server: Disk, workstations: Disk) -> None:
        self.spawn = spawn
        self.chaos = chaos
        self.system = chaos.system
        self.server = server
        self.workstations = workstations
        self.anchors: list[str] = []  # audit heads read before a server cut
        self.cuts = {"server": 0, "workstations": 0}
        self.lost: list[int] = []  # bytes each cut dropped

    def cut_server(self) -> None:
        try:  # the head audit_log answers is fsync'ed: a cut must not take it back
            head = self.system.call("audit_log", GetAuditHead(), timeout_s=5.0)
            if isinstance(head, AuditHead) and head.seq:
                self.anchors.append(f"{head.seq}:{head.hash}")
        except Exception:
            pass
        power_off(self.system.tree.pid)
        self.system.tree.wait()
        self.lost.append(self.server.cut()["lost_bytes"])
        self.cuts["server"] += 1
        self.system.tree = self.spawn(python_argv("run.py"), env=self.system.env, name="tree")
        wait_until(lambda: all(self.system.pid(name) for name in ACTORS), timeout=60)

    def cut_workstations(self) -> None:
        for s in self.chaos.sessions:
            assert s.agent.proc is not None
            power_off(s.agent.proc.pid)
            s.agent.proc.wait()
        self.lost.append(self.workstations.cut()["lost_bytes"])
        self.cuts["workstations"] += 1
        for s in self.chaos.sessions:
            s.agent.start()


def run_power_cuts(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path,
                   disks: tuple[Disk, Disk], *, sessions: int, actions: int, cuts: int,
                   between_s: tuple[float, float], action_delay_s: float,
                   settle_s: float) -> None:
    seed = int(os.environ.get("LEA_CHAOS_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    server, workstations = disks
    env = {**lea_env, "LEA_DATA_DIR": str(server.mkdir("var"))}
    system = System(spawn, env, tmp_path, extra_env={"LEA_RESTART_INTENSITY": "100000"})
    workflows = [chaos_workflow(rng, actions, f"wf{i}") for i in range(sessions)]
    chaos = Chaos(system, [
        Session(system.agent(f"m{i}", chaos_scenario(rng, wf, action_delay_s),
                             data_dir=workstations.mkdir(f"m{i}")), wf)
        for i, wf in enumerate(workflows)], rng)
    for i, s in enumerate(chaos.sessions):
        s.replay_id = system.start(s.wf, s.agent.machine_id, session_id=f"sess{i}")
    power = PowerCuts(spawn, chaos, server, workstations)
    for n in range(cuts):
        until = time.monotonic() + rng.uniform(*between_s)
        running = True
        while time.monotonic() < until:
            time.sleep(0.2)
            if (statuses := chaos.statuses()) is not None:
                chaos.operate(statuses)
                running = any(statuses[s.replay_id].status == "running"
                              for s in chaos.sessions)
        if not running:
            break  # a cut of an idle system shows nothing more
        # The first cut hits the server: the one the issue is about.
        if n and rng.random() < WORKSTATION_CUT_P:
            power.cut_workstations()
        else:
            power.cut_server()
    # The cuts did cut: at least two while replays ran, and they dropped unsynced data.
    assert sum(power.cuts.values()) >= 2 and power.cuts["server"] >= 1, power.cuts
    assert any(power.lost), power.lost

    deadline = time.monotonic() + settle_s
    while True:  # quiet: no replay runs, no pause the operator would answer
        chaos.tree_up()
        if (statuses := chaos.statuses()) is not None:
            chaos.operate(statuses)
            mine = [statuses[s.replay_id] for s in chaos.sessions]
            if all(r.status != "running" for r in mine) and not any(
                    chaos.resumable(s, r) for s, r in zip(chaos.sessions, mine, strict=True)):
                break
        if time.monotonic() > deadline:
            pytest.fail(f"seed {seed}: not settled {settle_s}s after the last cut")
        time.sleep(0.3)
    time.sleep(1.0)  # late copies of dispatches and reports get their chance to do harm
    summary = check_end_state(chaos, seed)  # exactly once, from the effects logs
    check_trail(system, chaos, power, Path(env["LEA_DATA_DIR"]), seed)
    print(f"\npower cuts seed={seed}: {sessions} sessions x {actions} actions, cuts "
          f"{power.cuts}, bytes dropped per cut {power.lost}, anchors {len(power.anchors)}")
    print(f"  {summary}")


def check_trail(system: System, chaos: Chaos, power: PowerCuts, data_dir: Path,
                seed: int) -> None:
    """The trail after the cuts: complete, unforked, each input explained."""
    def delivered() -> bool:
        return not (trail.outbox_rows(data_dir, "dispatcher")
                    or trail.outbox_rows(data_dir, "supervisor"))

    wait_until(delivered, timeout=60)
    records = trail.export_all(system.env)
    kinds = {r["kind"] for r in records}
    assert "record_conflict" not in kinds, f"seed {seed}: an id named two records"
    trail.assert_rows_complete(records, "dispatcher", trail.store_id(data_dir, "dispatcher"))
    trail.assert_rows_complete(records, "supervisor", trail.store_id(data_dir, "supervisor"))
    sent = trail.dispatches(records)
    accepted = {action for action, _attempt, status in trail.reports(records)
                if status == "accepted"}
    for s in chaos.sessions:
        for effect in s.agent.effects():  # every input that ran...
            where = f"seed {seed}, {s.agent.machine_id}: {effect}"
            assert (effect["action_id"], effect["attempt_id"]) in sent, (
                f"{where}: no dispatch record for the attempt that ran")
            assert effect["action_id"] in accepted, f"{where}: no accepted report"
    for anchor in power.anchors:
        done = trail.run_cli(system.env, "audit", "verify", "--anchor", anchor)
        assert done.returncode == 0, (anchor, done.stdout, done.stderr)


# ``disks`` first: set up before ``spawn``, so unmounted after every process is stopped.
# Each cut restarts the whole tree: more than the suite's default timeout on a slow machine.
@pytest.mark.timeout(900)
def test_power_cuts_short(disks: tuple[Disk, Disk], spawn: Spawn, lea_env: dict[str, str],
                          tmp_path: Path) -> None:
    run_power_cuts(spawn, lea_env, tmp_path, disks, sessions=4, actions=20, cuts=4,
                   between_s=(2.0, 5.0), action_delay_s=0.5, settle_s=90)


@pytest.mark.long
@pytest.mark.timeout(3600)
def test_power_cuts_long(disks: tuple[Disk, Disk], spawn: Spawn, lea_env: dict[str, str],
                        tmp_path: Path) -> None:
    # The scene: six concurrent 40-step replays, and more cuts.
    run_power_cuts(spawn, lea_env, tmp_path, disks, sessions=6, actions=40, cuts=12,
                   between_s=(2.0, 6.0), action_delay_s=0.3, settle_s=180)

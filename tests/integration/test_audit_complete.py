"""Nothing lost on the way to the audit trail (docs/architecture.md), with real processes.

A simulated agent replays a long workflow under ``python run.py`` while audit_log is
kill -9'd every 2-4 s (or the dispatcher is killed mid-replay). Once audit_log is back and
the senders' outboxes are drained, ``audit show REPLAY_ID --json`` has every dispatch and
every report exactly once (against the dispatcher's reports log and the agent's effects
log), every row either sender ever committed is in the trail once, the supervisor's
records say each kill (actor_exited SIGKILL, actor_restarted), and ``audit verify`` passes.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from messages.workflow import Workflow
from tests.conftest import Spawn, wait_until
from tests.integration import trail_checks as trail
from tests.integration.system import Agent, System, clicks, workflow
from transport.client import CallFailed

KILL_EVERY_S = (2.0, 4.0)
# The loop detector's verdicts are not what is tested here, and the simulated screen changes
# little from step to step (its screen_static signal may pause a long replay): off.
QUIET = {"RPA_LOOP_DETECTOR_ENABLED": "false"}
DRAINED_WITHIN_S = 90.0  # a batch lost with a killed audit_log waits its 5 s call timeout


def mixed(n: int) -> Workflow:
    """Clicks on varied spots, with some typing and key combos in between (never the same
    action three times in a row: that is the loop detector's action_repeat)."""
    actions: list[dict[str, Any]] = clicks(n)
    for i in range(n):
        if i % 5 == 2:
            actions[i] = {"type": "type", "target_spec": {"by_text": "Commentaire"},
                          "parameters": {"text": f"note {i};"}}
        elif i % 7 == 3:
            actions[i] = {"type": "key_combo", "parameters": {"keys": ["tab"]}}
    return workflow(*actions, workflow_id=f"audit{n}")


def data_dir(system: System) -> Path:
    return Path(system.env["LEA_DATA_DIR"])


def wait_drained(system: System) -> None:
    """Until both senders have had every record acknowledged (audit_log is back)."""
    def drained() -> bool:
        return not (trail.outbox_rows(data_dir(system), "dispatcher")
                    or trail.outbox_rows(data_dir(system), "supervisor"))
    wait_until(drained, timeout=DRAINED_WITHIN_S, interval=0.2)


def kill_when_up(system: System, name: str, within_s: float = 10.0) -> int:
    """kill -9 the child ``name``, waiting for it to be running again if it is not yet."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return system.kill(name)
        except (LookupError, ProcessLookupError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def status(system: System, replay_id: str) -> str | None:
    """The replay's status, or None while the dispatcher cannot answer."""
    try:
        return system.status(replay_id).status
    except CallFailed as exc:
        print(f"status: {exc}")
        return None


def check_trail(system: System, agent: Agent, replay_id: str, wf: Workflow, *,
                same_attempts: bool) -> list[dict[str, Any]]:
    """The timeline of the replay is complete, so is the trail; it verifies. Every record."""
    env, where = system.env, data_dir(system)
    timeline = trail.show_json(env, replay_id)
    trail.assert_replay_complete(
        timeline, [a.action_id for a in wf.actions], trail.reports_log(where, replay_id),
        agent.effects(), same_attempts=same_attempts)
    everything = trail.export_all(env)
    trail.assert_rows_complete(everything, "dispatcher", trail.store_id(where, "dispatcher"))
    trail.assert_rows_complete(everything, "supervisor", trail.store_id(where, "supervisor"))
    verified = trail.verify(env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    return everything


def restarts(records: list[dict[str, Any]], name: str) -> tuple[int, int, int]:
    """(actor_exited by a SIGKILL not the supervisor's, every actor_exited, actor_restarted)
    records of the child ``name``."""
    ours = [r for r in records if r["source"] == "supervisor" and r["data"].get("name") == name]
    exits = [r for r in ours if r["kind"] == "actor_exited"]
    killed = sum(1 for r in exits
                 if r["data"]["signal"] == "SIGKILL" and r["data"]["reason"] == "signal")
    return killed, len(exits), sum(1 for r in ours if r["kind"] == "actor_restarted")


def wait_replaced(system: System, name: str, killed_pid: int) -> None:
    """Until the supervisor runs a new ``name``: its exit and restart records are then in
    its outbox, so a drained outbox means they are in the trail."""
    def replaced() -> bool:
        try:
            return system.child_pid(name) != killed_pid
        except LookupError:
            return False
    wait_until(replaced, timeout=DRAINED_WITHIN_S, interval=0.1)


def run_audit_log_kills(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, *,
                        steps: int, delay_s: float, min_kills: int) -> None:
    seed = int(os.environ.get("LEA_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"LEA_CHAOS_SEED={seed}")
    rng = random.Random(seed)
    system = System(spawn, lea_env, tmp_path, extra_env=QUIET)
    agent = system.agent("m1", {"default": {"delay_s": delay_s}})
    wf = mixed(steps)
    replay_id = system.start(wf, "m1")
    started = time.monotonic()
    kills, last_killed = 0, 0
    next_kill = time.monotonic() + rng.uniform(*KILL_EVERY_S)
    while (now_status := status(system, replay_id)) != "completed":
        assert system.tree.poll() is None, "the supervisor stopped the tree"
        assert now_status in (None, "running"), now_status  # no pause, no failure
        if time.monotonic() >= next_kill:
            last_killed = kill_when_up(system, "audit_log")
            kills += 1
            next_kill = time.monotonic() + rng.uniform(*KILL_EVERY_S)
        time.sleep(0.1)
    assert kills >= min_kills, f"the replay ended after {kills} kills: make it longer"
    replay_s = time.monotonic() - started
    wait_replaced(system, "audit_log", last_killed)
    wait_drained(system)
    records = check_trail(system, agent, replay_id, wf, same_attempts=True)
    # Each kill is said once; a start that misses its beacon under load is a further exit
    # (``hung``), and every exit, ours or not, is followed by a restart.
    killed, exits, restarted = restarts(records, "audit_log")
    assert killed == kills
    assert restarted == exits >= kills
    print(f"{steps} steps in {replay_s:.0f}s, {kills} kills of audit_log, {len(records)} "
          "records in the trail")


@pytest.mark.long  # CI's time: test_audit_log.py kills audit_log during appends
def test_kill9_of_audit_log_every_few_seconds_loses_and_duplicates_nothing(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    run_audit_log_kills(spawn, lea_env, tmp_path, steps=200, delay_s=0.04, min_kills=2)


@pytest.mark.long
def test_kill9_of_audit_log_long(spawn: Spawn, lea_env: dict[str, str],
                                 tmp_path: Path) -> None:
    run_audit_log_kills(spawn, lea_env, tmp_path, steps=1000, delay_s=0.1, min_kills=30)


def test_kill9_of_the_dispatcher_sends_its_unacknowledged_records_after_its_restart(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    """audit_log is frozen so records wait in the dispatcher's outbox; the dispatcher is
    kill -9'd with them there; after its restart each of them is in the trail once."""
    system = System(spawn, lea_env, tmp_path, extra_env=QUIET)
    agent = system.agent("m1", {"default": {"delay_s": 0.03}})
    wf = mixed(80)
    replay_id = system.start(wf, "m1")
    system.wait_status(replay_id, "running", where=lambda s: s.completed_actions >= 5)
    frozen = system.kill("audit_log", signal.SIGSTOP)
    try:
        pending = wait_until(lambda: (rows := trail.outbox_rows(data_dir(system), "dispatcher"))
                             and len(rows) >= 20 and rows, timeout=20)
        assert system.child_pid("audit_log") == frozen  # still frozen: none of them acked
        system.kill("dispatcher")
    finally:
        os.kill(frozen, signal.SIGCONT)  # (unless the supervisor killed it as hung)
    assert isinstance(pending, list)
    system.wait_status(replay_id, "completed", timeout=120)
    wait_drained(system)
    records = check_trail(system, agent, replay_id, wf, same_attempts=False)
    store = trail.store_id(data_dir(system), "dispatcher")
    found = trail.rows_of(records, "dispatcher", store)
    assert all(found[row] == 1 for row in pending)
    killed, exits, restarted = restarts(records, "dispatcher")
    assert killed == 1
    assert restarted == exits >= 1
    print(f"{len(pending)} records unacknowledged at the kill, all in the trail once")
    kinds = [r["kind"] for r in records if r["source"] == "dispatcher"]
    assert kinds.count("dispatcher_recovered") == 2  # its first start, and the restart

"""An attempt runs only if it is the one in flight when the agent is about to act.

A dispatch can wait in a frozen agent's socket while the system moves on: the replay is
cancelled, or the watchdog resends the step under a new attempt. When the agent wakes, it
claims the attempt from the dispatcher before any input (messages.dispatch.ClaimAttempt)
and a copy that is no longer current never runs. Without claims, the cancelled click of the
first test is performed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from messages.replay import CancelReplay, ReplayCancelled
from tests.conftest import Spawn, wait_until
from tests.integration.system import System, clicks, workflow
from tests.integration.transport_checks import agent_log, wait_ready

Env = dict[str, str]


def test_a_copy_of_a_cancelled_replay_never_runs(spawn: Spawn, lea_env: Env,
                                                 tmp_path: Path) -> None:
    system = System(spawn, lea_env, tmp_path, {"LEA_BEACON_TIMEOUT_S": "60"})
    agent = system.agent("c1")
    wait_ready(system, agent)
    agent.kill(signal.SIGSTOP)  # still registered: the dispatch reaches its socket
    rid = system.start(workflow(*clicks(2)), "c1")
    system.wait_inflight(rid)
    reply = system.call("dispatcher", CancelReplay(replay_id=rid, operator="test"))
    assert isinstance(reply, ReplayCancelled)
    agent.kill(signal.SIGCONT)
    wait_until(lambda: "the dispatcher says not_current" in agent_log(agent), timeout=30)
    assert agent.executed("s0") == 0 and agent.effects() == []


def test_a_resent_step_runs_once_under_the_attempt_in_flight(spawn: Spawn, lea_env: Env,
                                                             tmp_path: Path) -> None:
    """The agent is frozen with s0's first copy in its socket; the watchdog resends it
    (orphan timeout 3 s). On waking the agent holds two copies: the first is refused, the
    current one runs, once."""
    system = System(spawn, lea_env, tmp_path, {
        "LEA_BEACON_TIMEOUT_S": "60", "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "3",
        "RPA_WATCHDOG_SCAN_INTERVAL_S": "0.5", "RPA_WATCHDOG_MAX_RESENDS": "5"})
    agent = system.agent("c2")
    wait_ready(system, agent)
    agent.kill(signal.SIGSTOP)
    rid = system.start(workflow(*clicks(2)), "c2")
    first = system.wait_inflight(rid)
    wait_until(lambda: (e := system.inflight_of(rid)) is not None
               and e.attempt_id != first.attempt_id, timeout=30)
    agent.kill(signal.SIGCONT)
    system.wait_status(rid, "completed", timeout=60)
    assert agent.executed("s0") == 1 and agent.executed("s1") == 1
    ran = [e["attempt_id"] for e in agent.effects() if e["action_id"] == "s0"]
    assert ran != [first.attempt_id]  # the stale first copy was refused, a current one ran


def test_a_reconnecting_agent_is_not_sent_what_it_holds(spawn: Spawn, lea_env: Env,
                                                        tmp_path: Path) -> None:
    """The broker is killed while s0 executes (8 s): the agent reconnects and its hello
    names the attempt it holds, so the dispatcher keeps it instead of sending a copy.
    (A step dispatched after the hello was built may still be re-sent by it: harmless, the
    ledger answers; only s0, held all along, is checked. The watchdog is slow here: its
    resends are not what is tested.)"""
    system = System(spawn, lea_env, tmp_path, {"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60"})
    agent = system.agent("c3", {"actions": {"s0": {"delay_s": 8}}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(2)), "c3")
    wait_until(lambda: "executing click s0" in agent_log(agent), timeout=20)
    system.kill("broker")
    wait_until(lambda: agent_log(agent).count("dispatcher answered hello") >= 2, timeout=30)
    assert "s0 done" not in agent_log(agent)  # the hello came while s0 was held
    system.wait_status(rid, "completed", timeout=60)
    log = agent_log(agent)
    assert agent.executed("s0") == 1 and "s0 re-delivered" not in log
    assert "s0 already handled" not in log


def test_a_grant_read_after_the_steps_give_up_is_not_acted_on(spawn: Spawn, lea_env: Env,
                                                              tmp_path: Path) -> None:
    """s1's claim is held while the loop detector (frozen) owes its verdict on s0; the agent
    is frozen with the claim out; the verdict comes and the grant waits in the agent's
    socket while the watchdog gives s1 up (orphan timeout 6 s, no resend) and the replay
    pauses for a person. Woken, the agent reads a grant older than it was good for and does
    not click: no input after the pause. Without the grant's time, s1 is clicked then."""
    system = System(spawn, lea_env, tmp_path, {
        "LEA_BEACON_TIMEOUT_S": "60", "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "6",
        "RPA_WATCHDOG_SCAN_INTERVAL_S": "0.5", "RPA_WATCHDOG_MAX_RESENDS": "0",
        "RPA_LOOP_DETECTOR_TIMEOUT_S": "60",
        # The frozen loop detector stays registered, so that its late verdict is taken.
        "LEA_HEARTBEAT_INTERVAL_MS": "2000", "LEA_HEARTBEAT_LIVENESS": "10"})
    agent = system.agent("c4")
    wait_ready(system, agent)
    detector = system.kill("loop_detector", signal.SIGSTOP)
    try:
        rid = system.start(workflow(*clicks(2)), "c4")
        wait_until(lambda: "s1 attempt" in agent_log(agent)
                   and "claimed" in agent_log(agent).split("s1 attempt")[-1], timeout=30)
        agent.kill(signal.SIGSTOP)  # the claim is out; its grant waits for the verdict
    finally:
        os.kill(detector, signal.SIGCONT)
    system.wait_status(rid, "paused_need_help", timeout=60)
    agent.kill(signal.SIGCONT)
    wait_until(lambda: "its grant came too late" in agent_log(agent), timeout=30)
    assert agent.executed("s0") == 1 and agent.executed("s1") == 0
    assert [e["action_id"] for e in agent.effects()] == ["s0"]

"""A looping agent is stopped; a working one never is (docs/screens-and-pauses.md).

The whole tree and a simulated agent: the dispatcher shows every report to the loop
detector, and no input of the next step runs before its verdict. An agent whose inputs
change nothing (scenario ``loop``) makes its replay pause ``loop_detected`` within the
configured captures, with the signal and its evidence in the message; the same workflow
on a screen that moves on completes with no pause, even with a clock ticking; the kill
switch lets the loop run out.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from actors.loop_detector.config import LoopConfig
from tests.conftest import Spawn
from tests.integration.probes import hold, ready_agent
from tests.integration.system import System, workflow
from tests.unit.test_loop_simulated import WORKFLOW

Env = dict[str, str]
PAUSED = "paused_need_help"
N = LoopConfig().screen_static_n


def steps(k: int) -> list[dict[str, Any]]:
    """``k`` steps of a real-looking workflow (no three identical inputs in a row)."""
    return [WORKFLOW[i % len(WORKFLOW)] for i in range(k)]


def test_an_agent_whose_inputs_change_nothing_is_paused(spawn: Spawn, lea_env: Env,
                                                        tmp_path: Path) -> None:
    system = System(spawn, lea_env, tmp_path)
    ready_agent(system, "L1", scenario={"default": {"loop": True},
                                        "desktop": {"clock": True}})
    rid = system.start(workflow(*steps(N + 6)), "L1")
    s = system.wait_status(rid, PAUSED)
    assert s.pause_reason == "loop_detected"
    assert s.pause_message is not None
    assert s.pause_message.startswith("Léa semble bloquée — screen_static (")
    assert s.index <= N + 2  # stopped within the configured captures (N + 2 with a clock)
    assert s.queue_length > 0  # before the end of the workflow


def test_the_same_workflow_on_a_screen_that_moves_on_completes(spawn: Spawn, lea_env: Env,
                                                               tmp_path: Path) -> None:
    system = System(spawn, lea_env, tmp_path)
    ready_agent(system, "L2", scenario={"desktop": {"clock": True}})
    rid = system.start(workflow(*steps(N + 6)), "L2")
    s = system.wait_status(rid, "completed", PAUSED)
    assert (s.status, s.counters.get("pauses", 0)) == ("completed", 0)


def test_the_kill_switch_lets_a_looping_agent_run_out(spawn: Spawn, lea_env: Env,
                                                      tmp_path: Path) -> None:
    system = System(spawn, lea_env, tmp_path, {"RPA_LOOP_DETECTOR_ENABLED": "0"})
    ready_agent(system, "L3", scenario={"default": {"loop": True}})
    rid = system.start(workflow(*steps(N + 6)), "L3")
    s = system.wait_status(rid, "completed", PAUSED)
    assert (s.status, s.counters.get("pauses", 0)) == ("completed", 0)


def test_an_input_waits_for_the_verdict_on_the_step_before(spawn: Spawn, lea_env: Env,
                                                           tmp_path: Path) -> None:
    """The next step is dispatched without waiting for the verdict, but its input is not
    granted until the verdict is in: with the detector frozen, s1 reaches the agent and does
    not run; once the detector answers, it does (consult_inputs.py). The supervisor is told
    to be patient with the frozen detector, and the verdict timeout is long."""
    system = System(spawn, lea_env, tmp_path, {"RPA_LOOP_DETECTOR_TIMEOUT_S": "60",
                                                 "LEA_BEACON_TIMEOUT_S": "60"})
    agent = ready_agent(system, "L4")
    frozen = system.kill("loop_detector", signal.SIGSTOP)
    try:
        rid = system.start(workflow(*steps(3)), "L4")
        system.wait_status(rid, "running", where=lambda s: s.current_action_id == "s1")
        hold(lambda: [e["action_id"] for e in agent.effects()] == ["s0"], for_s=2.0)
        assert system.status(rid).current_action_id == "s1"
    finally:
        os.kill(frozen, signal.SIGCONT)
    s = system.wait_status(rid, "completed", PAUSED)
    assert (s.status, s.counters.get("pauses", 0)) == ("completed", 0)
    assert [e["action_id"] for e in agent.effects()] == ["s0", "s1", "s2"]


FAILING = {"actions": {"s1": {"fail": "target_not_found"}}}


def test_retry_threshold_fires_when_set_below_the_dispatchers_retries(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """retry_threshold in the running system: with RPA_LOOP_RETRY_THRESHOLD=2 a
    step failing again and again pauses ``loop_detected`` on the report of its second retry,
    before the dispatcher's own pause after MAX_RETRIES_PER_ACTION (3)."""
    system = System(spawn, lea_env, tmp_path, {"RPA_LOOP_RETRY_THRESHOLD": "2"})
    ready_agent(system, "L5", scenario=FAILING)
    rid = system.start(workflow(*steps(4)), "L5")
    s = system.wait_status(rid, PAUSED)
    assert s.pause_reason == "loop_detected" and s.pause_message is not None
    assert s.pause_message.startswith(
        "Léa semble bloquée — retry_threshold (action_id=s1, retries=2, threshold=2")


def test_with_the_default_retry_threshold_the_dispatcher_pauses_first(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """With the default (3) the dispatcher pauses the step first, with the more precise
    cause (docs/loop-detection.md)."""
    system = System(spawn, lea_env, tmp_path)
    ready_agent(system, "L6", scenario=FAILING)
    rid = system.start(workflow(*steps(4)), "L6")
    s = system.wait_status(rid, PAUSED)
    assert s.pause_reason == "target_not_found"

"""The dispatcher fails closed, through real processes (the tree and simulated agents):
no input redone after it may have happened, nothing run after a guard that never answered,
no input granted during a pause, a step marked critical confirmed by a person first
(docs/architecture.md, "The life of an action"). Each test failed before its rule.
"""

from __future__ import annotations

import signal
from pathlib import Path

from messages.replay import PauseReplay, ReplayResumed, ResumeReplay
from tests.conftest import Spawn, wait_until
from tests.integration.probes import reports
from tests.integration.system import FAST_WATCHDOG, System, clicks, workflow
from tests.integration.transport_checks import agent_log, wait_ready

Env = dict[str, str]
PAUSED = "paused_need_help"


def resume(system: System, rid: str, *acks: str) -> None:
    reply = system.call("dispatcher", ResumeReplay(
        replay_id=rid, acknowledged_check_ids=list(acks), operator="dr.test"))
    assert isinstance(reply, ReplayResumed), reply


def test_a_click_whose_next_capture_fails_is_not_clicked_again(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """The capture after the click fails (the lock screen came up): the report says the
    input was performed, so no ``_retry1`` clicks again; resuming goes on with the next
    step. Before: three more clicks (the retry budget), then a pause."""
    system = System(spawn, lea_env, tmp_path)
    agent = system.agent("f1", {"actions": {"s0": {"fail_after_input": "capture_failed: x"}}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(2)), "f1")
    s = system.wait_status(rid, PAUSED, "completed", timeout=60)
    assert s.pause_reason == "failed_after_input", s
    (report,) = reports(system, rid)
    assert report["body"]["input_performed"] == "performed"
    resume(system, rid)
    system.wait_status(rid, "completed", timeout=60)
    assert [e["action_id"] for e in agent.effects()] == ["s0", "s1"]


def test_an_input_call_that_fails_half_way_is_not_retried(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """The executor raises while sending the input: nobody can tell whether it went out.
    Before: ``executor_error`` was retried as if nothing had happened."""
    system = System(spawn, lea_env, tmp_path)
    agent = system.agent("f2", {"actions": {"s0": {"raise_in_input": True}}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(2)), "f2")
    s = system.wait_status(rid, PAUSED, "completed", timeout=60)
    assert s.pause_reason == "input_unknown", s
    assert [r["action_id"] for r in reports(system, rid)] == ["s0"]  # no s0_retry1
    assert "ne sait pas" in (s.pause_message or "")
    assert agent.effects() == []


def test_a_guard_the_watchdog_gave_up_stops_the_replay(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """The verify_screen never answers in time (its agent is slow): the watchdog gives it
    up. Before: the replay went on and clicked; now nothing runs until a person looked."""
    system = System(spawn, lea_env, tmp_path, {**FAST_WATCHDOG, "RPA_WATCHDOG_MAX_RESENDS": "0"})
    agent = system.agent("f3", {"actions": {"s0": {"delay_s": 30}}})
    wait_ready(system, agent)
    rid = system.start(workflow({"type": "verify_screen", "parameters": {}},
                                *clicks(1)), "f3")
    s = system.wait_status(rid, PAUSED, "completed", timeout=60)
    assert s.pause_reason == "guard_lost", s
    assert "s1" not in agent_log(agent)
    assert agent.effects() == []


def test_an_input_not_yet_claimed_at_a_pause_never_runs_until_the_resume(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """The click waits in a frozen agent's socket when the operator presses pause. Before:
    the claim was granted to the paused replay and the click ran after the pause."""
    system = System(spawn, lea_env, tmp_path, {"LEA_BEACON_TIMEOUT_S": "60"})
    agent = system.agent("f4")
    wait_ready(system, agent)
    agent.kill(signal.SIGSTOP)
    rid = system.start(workflow(*clicks(2)), "f4")
    first = system.wait_inflight(rid)
    system.call("dispatcher", PauseReplay(replay_id=rid, operator="dr.test"))
    agent.kill(signal.SIGCONT)
    wait_until(lambda: "the dispatcher says not_current" in agent_log(agent)
               or "the dispatcher says paused" in agent_log(agent), timeout=30)
    assert agent.effects() == [] and system.status(rid).status == PAUSED
    resume(system, rid)
    system.wait_status(rid, "completed", timeout=60)
    ran = [e for e in agent.effects() if e["action_id"] == "s0"]
    assert len(ran) == 1 and ran[0]["attempt_id"] != first.attempt_id


def test_a_click_marked_critical_waits_for_a_named_person(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """``safety_level: medical_critical`` on a click (not a pause_for_human). Before: the
    field was accepted and ignored, the click ran; now, in autonomous mode too, a person
    confirms it first."""
    system = System(spawn, lea_env, tmp_path)
    agent = system.agent("f5")
    wait_ready(system, agent)
    sign = {**clicks(1)[0], "intention": "Signer la prescription",
            "parameters": {"safety_level": "medical_critical"}}
    rid = system.start(workflow(sign), "f5", mode="autonomous")
    s = system.wait_status(rid, PAUSED, "completed", timeout=60)
    assert s.status == PAUSED and "Signer la prescription" in (s.pause_message or "")
    assert [c.id for c in s.safety_checks if c.required] == ["confirm_step"]
    assert agent.effects() == []
    resume(system, rid, "confirm_step")
    system.wait_status(rid, "completed", timeout=60)
    assert [e["action_id"] for e in agent.effects()] == ["s0"]

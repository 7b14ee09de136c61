"""Resuming a step given up by the watchdog must not perform it twice (docs/architecture.md).

A given-up click pauses its replay (``orphan_max_resends``): nobody knows whether the agent
performed it. The person resumes, which dispatches ``{step}_resume``, another action id. The
abandoned copies of the step may still reach the agent (queued in the broker, in its
socket), before or after the resumed step: the resume carries ``supersedes`` (the ids it
redoes) and the agent's ledger treats them all as one step. Exactly-once is proven by
counting effects-log lines per workflow step.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

from actors.dispatcher.machine.rules import base_id
from messages import events
from messages.dispatch import ActionReceived, DispatchAction, DispatchMeta
from messages.replay import ReplayResumed, ResumeReplay
from tests.conftest import Spawn, wait_until
from tests.integration.system import Agent, System, clicks, workflow
from tests.integration.transport_checks import (
    Bus,
    accepted,
    assert_all_reported,
    assert_one_at_a_time,
    ledger_row,
    reports,
    wait_ready,
    wait_registered,
)

PAUSED = "paused_need_help"
Env = dict[str, str]


def per_step(agent: Agent) -> Counter[str]:
    """Effects-log lines per workflow step (``_retryN``/``_resumeN`` mapped back)."""
    return Counter(base_id(e["action_id"]) for e in agent.effects())


def resume(system: System, replay_id: str) -> None:
    reply = system.call("dispatcher", ResumeReplay(replay_id=replay_id, operator="test"))
    assert isinstance(reply, ReplayResumed), reply


def test_abandoned_copies_arriving_before_the_resume_do_not_double_the_step(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """The agent is frozen (SIGSTOP) while s0, a click, is dispatched: the watchdog resends
    it twice, then gives up; the replay pauses ``orphan_max_resends``. A person sees nothing
    done and resumes (``s0_resume``). The agent comes back (SIGCONT) and receives the three
    abandoned copies of s0 and ``s0_resume``: the click is performed once, and the replay
    completes."""
    system = System(spawn, lea_env, tmp_path)
    agent = system.agent("o1")
    wait_ready(system, agent)
    agent.kill(signal.SIGSTOP)  # the first copy reaches its socket, the others the broker
    rid = system.start(workflow(*clicks(2)), "o1")

    paused = system.wait_status(rid, PAUSED, timeout=60)
    assert (paused.pause_reason, paused.index) == ("orphan_max_resends", 0)
    assert agent.effects() == []
    resume(system, rid)
    # Dispatched once the monitor router has answered (the replay awaits its route first).
    system.wait_status(rid, "running", where=lambda s: s.current_action_id == "s0_resume")

    agent.kill(signal.SIGCONT)
    done = system.wait_status(rid, "completed", timeout=60)
    assert done.completed_actions == 2
    time.sleep(1.0)  # late copies get their chance to do harm
    assert per_step(agent) == Counter({"s0": 1, "s1": 1}), agent.effects()
    assert accepted(system, rid, "s0_resume").success
    assert_all_reported(system, agent)
    assert_one_at_a_time(agent)


def test_an_abandoned_copy_arriving_after_the_resume_ran_is_not_executed(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """No agent serves the machine while s0 is dispatched and given up; its copies expire
    in the broker (request expiry 1 s). The agent starts, the person resumes, ``s0_resume``
    runs (3 s). A copy of the abandoned s0 then reaches the agent, once while s0_resume
    executes and once after the replay completed (as a broker would deliver a late copy):
    neither is executed, both are answered from the ledger with s0_resume's outcome
    (``already_executed``), recorded ``stale`` by the dispatcher."""
    system = System(spawn, lea_env, tmp_path, {"LEA_REQUEST_EXPIRY_S": "1"})
    bus = Bus(system.env)
    try:
        wait_registered(system, "o2", present=False)
        wf = workflow(*clicks(2))
        rid = system.start(wf, "o2")
        paused = system.wait_status(rid, PAUSED, timeout=60)
        assert paused.pause_reason == "orphan_max_resends"
        bus.wait_for(events.DISPATCH_ORPHAN_GIVEUP, replay_id=rid)
        abandoned = [e.data["attempt_id"] for e in bus.events(
            events.ACTION_DISPATCHED, replay_id=rid, action_id="s0")]
        assert len(abandoned) == 3  # the dispatch and its two resends
    finally:
        bus.close()
    # Long enough for a copy to arrive while it executes; shorter than the orphan timeout
    # (3 s), or the watchdog resends it and the accepted report is the ledger's answer.
    agent = system.agent("o2", {"actions": {"s0_resume": {"delay_s": 1.5}}})
    wait_ready(system, agent)
    resume(system, rid)

    def stale_copy(attempt_id: str) -> None:
        copy = DispatchAction(
            replay_id=rid, session_id=paused.session_id, machine_id="o2",
            action=wf.actions[0], attempt_id=attempt_id,
            dispatch_meta=DispatchMeta(first_dispatched_at=time.time(), resent_count=2))
        assert isinstance(system.call("agent.o2", copy), ActionReceived)

    wait_until(lambda: (row := ledger_row(agent, "s0_resume")) and row.state == "started",
               timeout=30)
    stale_copy(abandoned[0])  # while s0_resume executes
    system.wait_status(rid, "completed", timeout=60)
    stale_copy(abandoned[-1])  # after everything ran
    wait_until(lambda: len(reports(system, rid, "s0")) >= 2, timeout=30)
    time.sleep(1.0)
    assert [e["action_id"] for e in agent.effects()] == ["s0_resume", "s1"]
    late = reports(system, rid, "s0")
    assert [(r.status, r.success, r.warning) for r in late] == [
        ("stale", True, "already_executed")] * 2, late
    assert (accepted(system, rid, "s0_resume").success,
            accepted(system, rid, "s0_resume").warning) == (True, None)
    assert_all_reported(system, agent)
